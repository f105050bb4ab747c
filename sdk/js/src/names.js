// Name and type-string helpers shared by the runtime and tools/gen-wit.mjs
// (which must not load src/wit.js, the file it writes).

/** "list-dir" -> "listDir". */
export const camel = (s) => s.replace(/-([a-z0-9])/g, (_, c) => c.toUpperCase());

/** "listDir" -> "list-dir". */
export const kebab = (s) => s.replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`);

/** "a, list<b, c>" -> ["a", "list<b, c>"]. */
export function splitArgs(text) {
  const out = [];
  let depth = 0;
  let start = 0;
  for (let i = 0; i < text.length; i++) {
    if (text[i] === "<") depth++;
    else if (text[i] === ">") depth--;
    else if (text[i] === "," && depth === 0) {
      out.push(text.slice(start, i).trim());
      start = i + 1;
    }
  }
  out.push(text.slice(start).trim());
  return out;
}
