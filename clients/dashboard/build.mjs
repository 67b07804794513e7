// Builds the dashboard into server/corral_server/web/static/ (or the directory given as the
// first argument): app.js and app.css (minified, one bundle each, deterministic for the
// pinned esbuild), index.html naming them with a content hash (so a new build is never
// served from a stale cache), the web app manifest and the icons from public/.
import { createHash } from "node:crypto";
import { copyFileSync, mkdirSync, readFileSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import * as esbuild from "esbuild";

const here = dirname(fileURLToPath(import.meta.url));
const out = resolve(process.argv[2] ?? join(here, "../../server/corral_server/web/static"));

// The generated stubs live in clients/typescript and import @bufbuild/protobuf; resolve that
// (and connect) from this package, so the bundle holds one copy whatever else is installed.
const oneCopy = {
  name: "one-copy",
  setup(build) {
    build.onResolve({ filter: /^@(bufbuild|connectrpc)\// }, (args) => {
      if (args.resolveDir === here) return undefined;
      return build.resolve(args.path, { kind: args.kind, resolveDir: here });
    });
  },
};

rmSync(out, { recursive: true, force: true });
mkdirSync(out, { recursive: true });
await esbuild.build({
  entryPoints: { app: join(here, "src/main.tsx") },
  outdir: out,
  bundle: true,
  minify: true,
  format: "esm",
  target: ["es2022", "chrome110", "firefox115", "safari16"],
  jsx: "automatic",
  jsxImportSource: "preact",
  legalComments: "none",
  charset: "utf8",
  logLevel: "warning",
  plugins: [oneCopy],
});

const hash = (name) => createHash("sha256").update(readFileSync(join(out, name))).digest("hex").slice(0, 12);
const html = readFileSync(join(here, "public/index.html"), "utf8")
  .replace("app.js", `app.js?v=${hash("app.js")}`)
  .replace("app.css", `app.css?v=${hash("app.css")}`);
writeFileSync(join(out, "index.html"), html);
for (const name of readdirSync(join(here, "public")).sort()) {
  if (name !== "index.html") copyFileSync(join(here, "public", name), join(out, name));
}
