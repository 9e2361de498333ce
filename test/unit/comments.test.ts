import { readdir, readFile } from "node:fs/promises";
import { join, sep } from "node:path";
import { fileURLToPath } from "node:url";
import { expect } from "chai";

const root = fileURLToPath(new URL("../..", import.meta.url));

const MAX_TEXT_LINES = 3;
const C_LIKE = /\.(ts|mts|cts|js|mjs|cjs|proto)$/;
const SHELL = /\.sh$/;
/** Generated code and build or run output: not written by hand, so not held to the rule. */
const SKIPPED = new Set(["node_modules", "gen", "dist", "dist-bench", "bench-results", "test-artifacts", "scratch"]);

async function sourceFiles(dir = "", wanted = (name: string) => C_LIKE.test(name) || SHELL.test(name)): Promise<string[]> {
  const entries = await readdir(join(root, dir), { withFileTypes: true });
  const nested = await Promise.all(
    entries.map((e) => {
      const path = join(dir, e.name);
      if (e.name.startsWith(".") || SKIPPED.has(path)) return Promise.resolve([]);
      if (e.isDirectory()) return sourceFiles(path, wanted);
      return Promise.resolve(wanted(e.name) ? [path] : []);
    }),
  );
  return nested.flat();
}

/** How notes kept outside the repository get cited: a design or style note, spec sections, issues. */
const OUTSIDE_CITATION = /\(STYLE\b|\bSTYLE:|\bDESIGN\b|\bSPEC\.md\b|\b[Ss]pec(?: section)? \d{1,2}(?:\.\d+)*\b(?!-)|\bissue #?\d+\b/;

/** A comment block: where it starts and how many of its lines carry text. */
interface Block {
  line: number;
  textLines: number;
}

const hasText = (line: string): boolean =>
  line
    .replace(/^\s*(\/\*+|\*+\/?|\/\/+|#+)?/, "")
    .replace(/\*+\/\s*$/, "")
    .trim() !== "";

/** After these characters or keywords a `/` starts a regular expression, not a division. */
const REGEX_AFTER = /(^|[(,=:[!&|?{};+\-*%<>~^]|\b(?:return|typeof|case|do|else|in|of|new|delete|void|throw|yield|await))\s*$/;

/** Comments of TypeScript, JavaScript or protobuf source, skipping strings, templates and regexes. */
function cBlocks(source: string): Block[] {
  const lineOf = (i: number): number => source.slice(0, i).split("\n").length;
  const lineComments: { line: number; own: boolean; text: boolean }[] = [];
  const blocks: Block[] = [];
  const templates: number[] = []; // brace depth at which each open `${` returns to its template
  let depth = 0;
  let i = 0;
  const skipQuoted = (quote: string): void => {
    for (i++; i < source.length && source[i] !== quote && source[i] !== "\n"; i++) if (source[i] === "\\") i++;
    i++;
  };
  const skipTemplate = (): void => {
    for (; i < source.length; i++) {
      if (source[i] === "\\") i++;
      else if (source[i] === "`") return void i++;
      else if (source[i] === "$" && source[i + 1] === "{") {
        templates.push(depth++);
        i += 2;
        return;
      }
    }
  };
  while (i < source.length) {
    const c = source[i]!;
    const next = source[i + 1];
    if (c === "/" && next === "/") {
      const end = source.indexOf("\n", i) === -1 ? source.length : source.indexOf("\n", i);
      const start = source.lastIndexOf("\n", i - 1) + 1;
      lineComments.push({ line: lineOf(i), own: source.slice(start, i).trim() === "", text: hasText(source.slice(i, end)) });
      i = end;
    } else if (c === "/" && next === "*") {
      const close = source.indexOf("*/", i + 2);
      const end = close === -1 ? source.length : close + 2;
      blocks.push({ line: lineOf(i), textLines: source.slice(i, end).split("\n").filter(hasText).length });
      i = end;
    } else if (c === '"' || c === "'") skipQuoted(c);
    else if (c === "`") {
      i++;
      skipTemplate();
    } else if (c === "/" && REGEX_AFTER.test(source.slice(Math.max(0, i - 12), i))) {
      let inClass = false;
      for (i++; i < source.length && source[i] !== "\n" && (inClass || source[i] !== "/"); i++) {
        if (source[i] === "\\") i++;
        else if (source[i] === "[") inClass = true;
        else if (source[i] === "]") inClass = false;
      }
      i++;
    } else if (c === "{") {
      depth++;
      i++;
    } else if (c === "}") {
      depth--;
      i++;
      if (templates.at(-1) === depth) {
        templates.pop();
        skipTemplate();
      }
    } else i++;
  }
  // Consecutive whole-line `//` comments form one block.
  for (let k = 0; k < lineComments.length; ) {
    const first = lineComments[k]!;
    let n = first.text ? 1 : 0;
    let j = k + 1;
    while (first.own && j < lineComments.length && lineComments[j]!.own && lineComments[j]!.line === lineComments[j - 1]!.line + 1) {
      n += lineComments[j]!.text ? 1 : 0;
      j++;
    }
    blocks.push({ line: first.line, textLines: n });
    k = j;
  }
  return blocks.sort((a, b) => a.line - b.line);
}

/** Runs of whole-line `#` comments of a shell script (the shebang and here-documents left out). */
function shellBlocks(source: string): Block[] {
  const blocks: Block[] = [];
  let heredoc: string | undefined;
  let run: Block | undefined;
  source.split("\n").forEach((text, index) => {
    const line = index + 1;
    const trimmed = text.trim();
    const isComment = heredoc === undefined && trimmed.startsWith("#") && !(line === 1 && trimmed.startsWith("#!"));
    if (heredoc !== undefined) {
      if (trimmed === heredoc) heredoc = undefined;
    } else if (!isComment) {
      const m = /<<-?\s*['"]?(\w+)['"]?/.exec(text.replace(/(["'])(?:\\.|(?!\1).)*\1/g, ""));
      if (m) heredoc = m[1];
    }
    if (isComment) {
      run ??= { line, textLines: 0 };
      if (hasText(trimmed)) run.textLines++;
    } else if (run) {
      blocks.push(run);
      run = undefined;
    }
  });
  if (run) blocks.push(run);
  return blocks;
}

const longBlocks = (file: string, source: string): string[] =>
  (SHELL.test(file) ? shellBlocks(source) : cBlocks(source))
    .filter((b) => b.textLines > MAX_TEXT_LINES)
    .map((b) => `${file.split(sep).join("/")}:${b.line} (${b.textLines} lines)`);

describe("comments", () => {
  describe("the block counter", () => {
    it("counts a JSDoc block by its lines of text", () => {
      const src = "/**\n * one\n *\n * two\n * three\n * four\n */\nconst a = 1;\n";
      expect(longBlocks("x.ts", src)).to.deep.equal(["x.ts:1 (4 lines)"]);
      expect(longBlocks("x.ts", "/**\n * one\n * two\n * three\n */\n")).to.deep.equal([]);
    });

    it("joins consecutive line comments into one block, but not trailing ones", () => {
      expect(longBlocks("x.ts", "// a\n  // b\n//\n// c\n// d\nx();\n")).to.deep.equal(["x.ts:1 (4 lines)"]);
      expect(longBlocks("x.ts", "a(); // a\nb(); // b\nc(); // c\nd(); // d\n")).to.deep.equal([]);
      expect(longBlocks("x.ts", "// a\n// b\n\n// c\n// d\n")).to.deep.equal([]);
    });

    it("ignores comment markers inside strings, templates and regexes", () => {
      const src = [
        'const s = "/* not\\" a comment";',
        // biome-ignore lint/suspicious/noTemplateCurlyInString: source text holding a template literal, the case under test
        "const t = `// nor ${'this'} // nor ${`/* nested */`} this`;",
        "const r = /\\/\\/[/*]+/g;",
        "const u = 'a // b';",
        "// one",
        "// two",
        "const v = s.split(/\\/\\//);",
        "// three",
      ].join("\n");
      expect(cBlocks(src)).to.deep.equal([
        { line: 5, textLines: 2 },
        { line: 8, textLines: 1 },
      ]);
    });

    it("does not take a division for a regex", () => {
      expect(cBlocks("const a = b / c; // x\nconst d = e / f;\n// y\n")).to.deep.equal([
        { line: 1, textLines: 1 },
        { line: 3, textLines: 1 },
      ]);
    });

    it("counts protobuf and shell comments too", () => {
      expect(longBlocks("x.proto", "// a\n// b\n// c\n// d\nmessage M {}\n")).to.deep.equal(["x.proto:1 (4 lines)"]);
      const sh = "#!/bin/sh\n# a\n# b\n# c\n# d\ncat <<EOF\n# e\n# f\n# g\n# h\nEOF\n";
      expect(longBlocks("x.sh", sh)).to.deep.equal(["x.sh:2 (4 lines)"]);
      expect(shellBlocks(sh)).to.have.length(1);
    });
  });

  it("nothing in source or docs cites a document the repository does not hold", async () => {
    const self = join("test", "unit", "comments.test.ts");
    const files = [...(await sourceFiles()), ...(await sourceFiles("", (name) => name.endsWith(".md")))].filter((f) => f !== self);
    const cites: string[] = [];
    for (const file of files) {
      (await readFile(join(root, file), "utf8")).split("\n").forEach((text, i) => {
        if (OUTSIDE_CITATION.test(text)) cites.push(`${file.split(sep).join("/")}:${i + 1}`);
      });
    }
    expect(cites, "the repository stands alone: say the rule instead of citing where it came from").to.deep.equal([]);
  });

  it(`no comment block in hand-written source is over ${MAX_TEXT_LINES} lines of text`, async () => {
    const over: string[] = [];
    for (const file of await sourceFiles()) over.push(...longBlocks(file, await readFile(join(root, file), "utf8")));
    expect(over, "comments say why in at most three lines").to.deep.equal([]);
  });
});
