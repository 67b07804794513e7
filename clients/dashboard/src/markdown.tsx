// A small Markdown subset rendered straight into Preact elements: agent text is hostile
// input, so nothing here ever becomes HTML markup (no innerHTML anywhere); text is text.
// Block: paragraphs, # headings, ``` fences, > quotes, - / 1. lists. Inline: `code`,
// **bold**, *em*, [links](http...) (only http, https and mailto links become links).
import type { ComponentChildren, JSX } from "preact";

const SAFE_URL = /^(https?:|mailto:)/i;
const INLINE = /(`+)([^`]|[^`][\s\S]*?[^`])\1|\*\*([^*]+)\*\*|\*([^*\s][^*]*)\*|_([^_\s][^_]*)_|\[([^\]]+)\]\(([^)\s]+)\)/;

export function inline(text: string): ComponentChildren[] {
  const out: ComponentChildren[] = [];
  let rest = text;
  for (let guard = 0; rest && guard < 10000; guard++) {
    const m = INLINE.exec(rest);
    if (!m) break;
    if (m.index > 0) out.push(rest.slice(0, m.index));
    if (m[1]) out.push(<code>{m[2]}</code>);
    else if (m[3] !== undefined) out.push(<strong>{inline(m[3])}</strong>);
    else if (m[4] !== undefined) out.push(<em>{inline(m[4])}</em>);
    else if (m[5] !== undefined) out.push(<em>{inline(m[5])}</em>);
    else if (SAFE_URL.test(m[7]))
      out.push(
        <a href={m[7]} target="_blank" rel="noopener noreferrer nofollow">
          {m[6]}
        </a>,
      );
    else out.push(m[0]);
    rest = rest.slice(m.index + m[0].length);
  }
  if (rest) out.push(rest);
  return out;
}

type Block = JSX.Element;

export function Markdown({ text }: { text: string }): JSX.Element {
  return <div class="md">{blocks(text.replace(/\r\n?/g, "\n").split("\n"))}</div>;
}

function blocks(lines: string[]): Block[] {
  const out: Block[] = [];
  let i = 0;
  while (i < lines.length) {
    const line = lines[i];
    const fence = /^\s*(```|~~~)\s*([\w+-]*)/.exec(line);
    if (fence) {
      const body: string[] = [];
      for (i++; i < lines.length && !lines[i].trim().startsWith(fence[1]); i++) body.push(lines[i]);
      i++;
      out.push(
        <pre data-lang={fence[2] || undefined}>
          <code>{body.join("\n")}</code>
        </pre>,
      );
      continue;
    }
    const heading = /^(#{1,6})\s+(.*)$/.exec(line);
    if (heading) {
      const Tag = `h${Math.min(heading[1].length + 2, 6)}` as "h3";
      out.push(<Tag>{inline(heading[2])}</Tag>);
      i++;
      continue;
    }
    if (/^\s*>/.test(line)) {
      const body: string[] = [];
      for (; i < lines.length && /^\s*>/.test(lines[i]); i++) body.push(lines[i].replace(/^\s*> ?/, ""));
      out.push(<blockquote>{blocks(body)}</blockquote>);
      continue;
    }
    const item = /^\s*([-*+]|\d+[.)])\s+/;
    if (item.test(line)) {
      const ordered = /\d/.test(item.exec(line)![1]);
      const items: string[] = [];
      for (; i < lines.length && item.test(lines[i]); i++) items.push(lines[i].replace(item, ""));
      const children = items.map((t) => <li>{inline(t)}</li>);
      out.push(ordered ? <ol>{children}</ol> : <ul>{children}</ul>);
      continue;
    }
    if (!line.trim()) {
      i++;
      continue;
    }
    const para: string[] = [];
    for (; i < lines.length && lines[i].trim() && !startsBlock(lines[i]); i++) para.push(lines[i]);
    out.push(<p>{joinLines(para)}</p>);
  }
  return out;
}

function startsBlock(line: string): boolean {
  return /^(\s*(```|~~~)|#{1,6}\s|\s*>|\s*([-*+]|\d+[.)])\s+)/.test(line);
}

function joinLines(lines: string[]): ComponentChildren[] {
  const out: ComponentChildren[] = [];
  lines.forEach((l, n) => {
    if (n) out.push(<br />);
    out.push(...inline(l));
  });
  return out;
}
