import { existsSync, readdirSync, readFileSync, statSync } from "node:fs";
import { dirname, join, relative, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { expect } from "chai";

const repo = fileURLToPath(new URL("../..", import.meta.url));

function markdownFiles(dir: string): string[] {
  return readdirSync(dir).flatMap((name) => {
    const path = join(dir, name);
    if (statSync(path).isDirectory()) return markdownFiles(path);
    return name.endsWith(".md") ? [path] : [];
  });
}

/** The page's text without fenced code blocks and inline code, where brackets are not links. */
function prose(text: string): string {
  return text.replace(/^(```|~~~)[^\n]*\n[\s\S]*?^\1[^\n]*$/gm, "").replace(/`[^`\n]*`/g, "");
}

/** GitHub's anchor for a heading: lower case, punctuation dropped, spaces as hyphens. */
function slug(heading: string): string {
  return heading
    .trim()
    .toLowerCase()
    .replace(/[^\p{L}\p{N}\s_-]/gu, "")
    .replace(/\s/g, "-");
}

function anchors(file: string): Set<string> {
  const seen = new Map<string, number>();
  const out = new Set<string>();
  const text = readFileSync(file, "utf8").replace(/^(```|~~~)[^\n]*\n[\s\S]*?^\1[^\n]*$/gm, "");
  for (const m of text.matchAll(/^#{1,6}\s+(.+?)\s*#*\s*$/gm)) {
    const base = slug(m[1]!);
    const n = seen.get(base) ?? 0;
    seen.set(base, n + 1);
    out.add(n === 0 ? base : `${base}-${n}`);
  }
  return out;
}

/** Every relative link of README.md and docs/ leads to a file that exists, and to a heading on it when it names one. */
describe("documentation links", () => {
  it("every relative link in README.md and docs/ resolves, anchors included", () => {
    const files = [join(repo, "README.md"), ...markdownFiles(join(repo, "docs"))];
    const broken: string[] = [];
    let checked = 0;
    for (const file of files) {
      for (const m of prose(readFileSync(file, "utf8")).matchAll(/\]\(([^)\s]+)(?:\s+"[^"]*")?\)/g)) {
        const target = m[1]!;
        if (/^[a-z][a-z0-9+.-]*:/i.test(target)) continue; // http:, https:, mailto:
        const [path, anchor] = target.split("#") as [string, string | undefined];
        const dest = path === "" ? file : resolve(dirname(file), decodeURI(path));
        checked++;
        const where = `${relative(repo, file)}: ${target}`;
        if (!existsSync(dest)) broken.push(`${where} (no such file)`);
        else if (anchor && dest.endsWith(".md") && !anchors(dest).has(anchor)) broken.push(`${where} (no such heading)`);
      }
    }
    expect(checked).to.be.above(50);
    expect(broken).to.deep.equal([]);
  });
});
