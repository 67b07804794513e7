// A line-protocol bridge from pytest to Playwright (playwright-core, pinned in
// clients/dashboard) driving Debian's chromium, headless, with the flags a closed network
// needs. One JSON request per stdin line ({id, op, ...}); one JSON answer per stdout line
// ({id, ok, value} or {id, ok: false, error}). Ops run one at a time, in order.
import { createRequire } from "node:module";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, dirname } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const require = createRequire(join(here, "../../clients/dashboard/package.json"));
const { chromium } = require("playwright-core");

const profile = mkdtempSync(join(tmpdir(), "corral-chromium-"));
const context = await chromium.launchPersistentContext(profile, {
  executablePath: process.env.CORRAL_CHROMIUM ?? "/usr/bin/chromium",
  headless: true,
  args: [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
  ],
  viewport: { width: 1280, height: 800 },
});
for (const p of context.pages()) await p.close();

// Playwright takes a string as an expression, not a function: make it a function here (it is
// sent to the page as its source text).
const fn = (js) => (0, eval)(`(${js})`);

const pages = new Map();
const errors = new Map();
let nextPage = 1;

const ops = {
  async newPage({ width, height, colorScheme }) {
    // Each page is a tab of its own (its own sessionStorage: its own client id and token).
    const page = await context.newPage();
    await page.setViewportSize({ width, height });
    if (colorScheme) await page.emulateMedia({ colorScheme });
    const id = nextPage++;
    pages.set(id, page);
    errors.set(id, []);
    page.on("pageerror", (err) => errors.get(id).push(String(err)));
    // The page asks before archiving (confirm()): the tests say yes.
    page.on("dialog", (dialog) => dialog.accept().catch(() => undefined));
    return id;
  },
  async goto({ page, url }) {
    await pages.get(page).goto(url);
  },
  async viewport({ page, width, height }) {
    await pages.get(page).setViewportSize({ width, height });
  },
  async click({ page, selector, timeout }) {
    await pages.get(page).locator(selector).first().click({ timeout });
  },
  async fill({ page, selector, text, timeout }) {
    await pages.get(page).locator(selector).first().fill(text, { timeout });
  },
  async press({ page, selector, key, timeout }) {
    await pages.get(page).locator(selector).first().press(key, { timeout });
  },
  async select({ page, selector, value, timeout }) {
    await pages.get(page).locator(selector).first().selectOption(value, { timeout });
  },
  async waitFor({ page, selector, state, timeout }) {
    await pages.get(page).locator(selector).first().waitFor({ state: state ?? "visible", timeout });
  },
  async waitForFunction({ page, js, arg, timeout, polling }) {
    const handle = await pages.get(page).waitForFunction(fn(js), arg, { timeout, polling: polling ?? 50 });
    return await handle.jsonValue();
  },
  async evaluate({ page, js, arg }) {
    return await pages.get(page).evaluate(fn(js), arg);
  },
  async text({ page, selector }) {
    return await pages.get(page).locator(selector).allInnerTexts();
  },
  async count({ page, selector }) {
    return await pages.get(page).locator(selector).count();
  },
  async screenshot({ page, path }) {
    await pages.get(page).screenshot({ path });
  },
  async pageErrors({ page }) {
    return errors.get(page);
  },
  async closePage({ page }) {
    await pages.get(page).close();
    pages.delete(page);
  },
};

async function shutdown() {
  await context.close().catch(() => undefined);
  rmSync(profile, { recursive: true, force: true });
  process.exit(0);
}

const lines = createInterface({ input: process.stdin });
process.stdout.write(JSON.stringify({ id: 0, ok: true, value: "ready" }) + "\n");
for await (const line of lines) {
  const request = JSON.parse(line);
  if (request.op === "quit") break;
  try {
    const value = await ops[request.op](request);
    process.stdout.write(JSON.stringify({ id: request.id, ok: true, value: value ?? null }) + "\n");
  } catch (err) {
    process.stdout.write(JSON.stringify({ id: request.id, ok: false, error: String(err?.message ?? err) }) + "\n");
  }
}
await shutdown();
