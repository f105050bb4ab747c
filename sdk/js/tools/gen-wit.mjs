// Generates src/wit.js (the WIT types and imported functions as data) and
// src/wit.d.ts (their TypeScript types) from Tend's WIT, so the SDK's
// wrappers, its fakes' codec and its types cover every function of world
// `plugin` and cannot drift from it: test/wit.test.js fails when either file
// is stale. Run `node tools/gen-wit.mjs` after changing wit/*.wit.
//
// It reads the subset of WIT that Tend's contract uses: interfaces with
// `use`, records, enums, variants and functions, and one world.

import { readFileSync, readdirSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { camel, splitArgs } from "../src/names.js";

const here = dirname(fileURLToPath(import.meta.url));
const defaultWit = join(here, "..", "..", "..", "wit");

/** Tokens of a WIT file; `///` doc lines are kept as `doc` tokens. */
function tokenize(text, file) {
  const tokens = [];
  const re = /\s+|\/\/\/([^\n]*)|\/\/[^\n]*|(->|[{}()<>,;:.=@_*])|(%?[a-z][a-z0-9-]*|[0-9]+(?:\.[0-9]+)*)/gy;
  let m;
  while (re.lastIndex < text.length) {
    const at = re.lastIndex;
    m = re.exec(text);
    if (!m) throw new Error(`${file}: cannot read WIT at ${JSON.stringify(text.slice(at, at + 30))}`);
    if (m[1] !== undefined) tokens.push({ doc: m[1].replace(/^ /, "") });
    else if (m[2] || m[3]) tokens.push({ t: m[2] || m[3] });
  }
  return tokens;
}

class Parser {
  constructor(tokens, file) {
    this.tokens = tokens;
    this.i = 0;
    this.file = file;
  }
  docs() {
    const lines = [];
    while (this.tokens[this.i]?.doc !== undefined) lines.push(this.tokens[this.i++].doc);
    return lines;
  }
  peek() {
    this.docs();
    return this.tokens[this.i]?.t;
  }
  next() {
    const t = this.peek();
    if (t === undefined) throw new Error(`${this.file}: unexpected end of file`);
    this.i++;
    return t;
  }
  expect(want) {
    const t = this.next();
    if (t !== want) throw new Error(`${this.file}: expected ${want}, found ${t}`);
  }
  /** A type expression, as written: "list<tuple<string, string>>". */
  type() {
    let t = this.next();
    if (this.peek() === "<") {
      this.next();
      const args = [this.type()];
      while (this.peek() === ",") {
        this.next();
        args.push(this.type());
      }
      this.expect(">");
      t += `<${args.join(", ")}>`;
    }
    return t;
  }
  /** Items `name` or `name: type` (or `name(type)`) up to `close`. */
  items(close, sep) {
    const out = [];
    for (;;) {
      const doc = this.docs();
      if (this.peek() === close) break;
      const name = this.next().replace(/^%/, "");
      let type = null;
      if (sep === ":" && this.peek() === ":") {
        this.next();
        type = this.type();
      } else if (sep === "(" && this.peek() === "(") {
        this.next();
        type = this.type();
        this.expect(")");
      }
      out.push({ name, type, doc });
      if (this.peek() === ",") this.next();
    }
    this.expect(close);
    return out;
  }
}

/** Interfaces (name -> {doc, types, funcs, uses}) and the world's imports. */
export function parseWit(dir = defaultWit) {
  const interfaces = {};
  let world = null;
  let pkg = null;
  for (const file of readdirSync(dir).filter((f) => f.endsWith(".wit")).sort()) {
    const p = new Parser(tokenize(readFileSync(join(dir, file), "utf8"), file), file);
    while (p.peek() !== undefined) {
      const doc = p.docs();
      const kw = p.next();
      if (kw === "package") {
        let name = "";
        for (let t = p.next(); t !== ";"; t = p.next()) name += t;
        pkg = name;
      } else if (kw === "interface") {
        const iface = { name: p.next(), doc, types: [], funcs: [], uses: {} };
        interfaces[iface.name] = iface;
        p.expect("{");
        while (p.peek() !== "}") {
          const doc = p.docs();
          const what = p.next();
          if (what === "use") {
            const from = p.next();
            p.expect(".");
            p.expect("{");
            for (const { name } of p.items("}", null)) iface.uses[name] = from;
            p.expect(";");
          } else if (what === "record" || what === "enum" || what === "variant") {
            const name = p.next();
            p.expect("{");
            const items = p.items("}", what === "record" ? ":" : what === "variant" ? "(" : null);
            iface.types.push({ kind: what, name, doc, items });
          } else {
            const name = what.replace(/^%/, "");
            p.expect(":");
            p.expect("func");
            p.expect("(");
            const params = p.items(")", ":");
            let result = null;
            if (p.peek() === "->") {
              p.next();
              result = p.type();
            }
            p.expect(";");
            iface.funcs.push({ name, doc, params, result });
          }
        }
        p.expect("}");
      } else if (kw === "world") {
        world = { name: p.next(), imports: [], exports: [] };
        p.expect("{");
        while (p.peek() !== "}") {
          const dir = p.next();
          world[dir === "import" ? "imports" : "exports"].push(p.next());
          p.expect(";");
        }
        p.expect("}");
      } else {
        throw new Error(`${file}: unexpected ${kw}`);
      }
    }
  }
  if (!world) throw new Error(`${dir}: no world`);
  return { interfaces, world, package: pkg };
}

const PRIMITIVES = new Set(["bool", "u8", "u16", "u32", "u64", "s8", "s16", "s32", "s64", "f32", "f64", "string", "_"]);

/** A type expression with every named type qualified: "list<files.dir-entry>". */
function qualify(type, iface) {
  return type.replace(/[a-z][a-z0-9-]*/g, (name) => {
    if (PRIMITIVES.has(name) || ["list", "option", "result", "tuple"].includes(name)) return name;
    const owner = iface.uses[name] ?? iface.name;
    return `${owner}.${name}`;
  });
}

const pascal = (s) => camel(s).replace(/^./, (c) => c.toUpperCase());

/** The data of src/wit.js: TYPES and IMPORTS, every name qualified. */
export function witData(wit = parseWit()) {
  const TYPES = {};
  const IMPORTS = {};
  for (const iface of Object.values(wit.interfaces)) {
    for (const t of iface.types) {
      const key = `${iface.name}.${t.name}`;
      if (t.kind === "enum") TYPES[key] = { enum: t.items.map((i) => i.name) };
      else
        TYPES[key] = {
          [t.kind]: Object.fromEntries(t.items.map((i) => [i.name, i.type && qualify(i.type, iface)])),
        };
    }
  }
  for (const name of wit.world.imports) {
    const iface = wit.interfaces[name];
    IMPORTS[name] = Object.fromEntries(
      iface.funcs.map((f) => [
        f.name,
        {
          params: Object.fromEntries(f.params.map((p) => [p.name, qualify(p.type, iface)])),
          result: f.result && qualify(f.result, iface),
        },
      ]),
    );
  }
  return { TYPES, IMPORTS };
}

/** TypeScript for a qualified WIT type; `input` for what a plugin passes. */
function tsType(type, input) {
  const m = /^(list|option|result|tuple)<(.*)>$/.exec(type);
  if (!m) {
    if (type === "string") return "string";
    if (type === "bool") return "boolean";
    if (type === "_") return "void";
    if (PRIMITIVES.has(type)) return "number";
    return pascal(type.split(".")[1]);
  }
  const args = splitArgs(m[2]);
  switch (m[1]) {
    case "list":
      if (args[0] === "u8") return input ? "Uint8Array | string" : "Uint8Array";
      // A union item needs parentheses: `(Response | TendError)[]`.
      return /\|/.test(tsType(args[0], input)) ? `(${tsType(args[0], input)})[]` : `${tsType(args[0], input)}[]`;
    case "option":
      return `${tsType(args[0], input)} | null`;
    case "tuple":
      return `[${args.map((a) => tsType(a, input)).join(", ")}]`;
    default:
      // A result inside a value (send-all): the answer, or the error as a value.
      return `${tsType(args[0], input)} | TendError`;
  }
}

function comment(doc, indent) {
  if (!doc.length) return "";
  return `${indent}/**\n${doc.map((l) => `${indent} * ${l}`.trimEnd()).join("\n")}\n${indent} */\n`;
}

/** The text of src/wit.d.ts. */
export function witTypes(wit = parseWit()) {
  let out = HEADER + 'import type { TendError } from "./errors.js";\n';
  const seen = new Set();
  for (const iface of Object.values(wit.interfaces)) {
    for (const t of iface.types) {
      const name = pascal(t.name);
      if (seen.has(name)) throw new Error(`two WIT types are named ${name}: rename one`);
      seen.add(name);
      if (t.name === "error") continue; // TendError and its subclasses stand for it.
      out += "\n" + comment(t.doc, "");
      if (t.kind === "enum") {
        out += `export type ${name} =\n${t.items.map((i) => `${comment(i.doc, "  ")}  | ${JSON.stringify(i.name)}`).join("\n")};\n`;
      } else if (t.kind === "variant") {
        const cases = t.items.map((i) => {
          const val = i.type ? `; val: ${tsType(qualify(i.type, iface), false)}` : "";
          return `${comment(i.doc, "  ")}  | { tag: ${JSON.stringify(i.name)}${val} }`;
        });
        out += `export type ${name} =\n${cases.join("\n")};\n`;
      } else {
        out += `export interface ${name} {\n`;
        for (const f of t.items) {
          const type = qualify(f.type, iface);
          const optional = type.startsWith("option<") ? "?" : "";
          out += `${comment(f.doc, "  ")}  ${camel(f.name)}${optional}: ${tsType(type, false)};\n`;
        }
        out += "}\n";
      }
    }
  }
  out += "\n/** Every capability of world `plugin`, as the host (or `FakeHost`) offers it. */\nexport interface Host {\n";
  for (const name of wit.world.imports) out += `  ${camel(name)}: ${pascal(name)};\n`;
  out += "}\n";
  for (const name of wit.world.imports) {
    const iface = wit.interfaces[name];
    out += "\n" + comment(iface.doc, "") + `export interface ${pascal(name)} {\n`;
    for (const f of iface.funcs) {
      // Option parameters may be left out when only option parameters follow.
      const types = f.params.map((p) => qualify(p.type, iface));
      const params = f.params.map((p, i) => {
        const omissible = types.slice(i).every((t) => t.startsWith("option<"));
        return `${camel(p.name)}${omissible ? "?" : ""}: ${tsType(types[i], true)}`;
      });
      const result = f.result ? qualify(f.result, iface) : "_";
      const m = /^result<(.*)>$/.exec(result);
      const ret = tsType(m ? splitArgs(m[1])[0] : result, false);
      const throws = m ? ["Throws a `TendError` subclass (`DeniedError`, `NotFoundError`, ...) on an error."] : [];
      out += comment([...f.doc, ...(f.doc.length && throws.length ? [""] : []), ...throws], "  ");
      out += `  ${camel(f.name)}(${params.join(", ")}): ${ret};\n`;
    }
    out += "}\n";
  }
  return out;
}

const HEADER = "// Generated by tools/gen-wit.mjs from wit/*.wit: do not edit.\n";

/** One `"key": value,` line per entry. */
const lines = (obj, indent) =>
  Object.entries(obj)
    .map(([k, v]) => `${indent}${JSON.stringify(k)}: ${JSON.stringify(v)},\n`)
    .join("");

export function witModule(wit = parseWit()) {
  const { TYPES, IMPORTS } = witData(wit);
  return (
    HEADER +
    "// The WIT of world `plugin` as data: every type (qualified names) and every\n" +
    "// imported function's parameters and result, for the wrappers and the fakes' codec.\n\n" +
    `export const TYPES = {\n${lines(TYPES, "  ")}};\n\n` +
    `export const IMPORTS = {\n${Object.entries(IMPORTS)
      .map(([k, v]) => `  ${JSON.stringify(k)}: {\n${lines(v, "    ")}  },\n`)
      .join("")}};\n`
  );
}

/** src/imports.js: the component's import of every interface with functions. */
export function importsModule(wit = parseWit()) {
  const [namespace, rest] = wit.package.split(":");
  const [pkg, version] = rest.split("@");
  const names = wit.world.imports.filter((name) => wit.interfaces[name].funcs.length);
  return (
    HEADER +
    "// The engine's imports of world `plugin`, by interface name. Only the component\n" +
    "// build imports this module (Node cannot resolve `tend:plugin/...`).\n\n" +
    names.map((name) => `import ${camel(name)} from "${namespace}:${pkg}/${name}@${version}";\n`).join("") +
    `\nexport const IMPORTED = { ${names.map((name) => (camel(name) === name ? name : `${JSON.stringify(name)}: ${camel(name)}`)).join(", ")} };\n`
  );
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const wit = parseWit(process.argv[2] ?? defaultWit);
  writeFileSync(join(here, "..", "src", "wit.js"), witModule(wit));
  writeFileSync(join(here, "..", "src", "imports.js"), importsModule(wit));
  writeFileSync(join(here, "..", "src", "wit.d.ts"), witTypes(wit));
}
