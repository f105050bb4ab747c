#!/usr/bin/env node
// tend-js-build PLUGIN.js OUT.wasm [--opt-size]
//
// Builds a JavaScript plugin into a Tend component: esbuild bundles the
// plugin (whose default export is `definePlugin(...)`) with @tend/sdk and
// the engine adapter into one ES module, leaving `tend:plugin/*` imports to
// the engine; componentize-qjs then embeds it in QuickJS against world
// `plugin` of the WIT next to this SDK (or $TEND_WIT), snapshotting the
// initialized engine so a reconcile starts warm.
//
// The engine is QuickJS (`--sync`: no component-model async, which the host
// does not enable): a 1.6 MB component that Winch compiles in about 0.1 s,
// where StarlingMonkey gives 12 MB and seconds of compile per node.
// `--opt-size` selects QuickJS's smaller runtime, which uses tail calls:
// only Cranelift compiles it (the host falls back to it from Winch).
//
// esbuild and componentize-qjs come from PATH (`cargo xtask lang js` installs
// them into <tend>/target/npm/node_modules/.bin).

import { execFileSync } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const sdk = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const wit = process.env.TEND_WIT || resolve(sdk, "..", "..", "wit");

const args = process.argv.slice(2);
const optSize = args.includes("--opt-size");
const [plugin, out] = args.filter((a) => a !== "--opt-size");
if (!plugin || !out || args.length > 3) {
  console.error("usage: tend-js-build PLUGIN.js OUT.wasm [--opt-size]");
  process.exit(2);
}

function tool(name, argv) {
  try {
    execFileSync(name, argv, { stdio: ["ignore", "ignore", "inherit"] });
  } catch (e) {
    if (e.code === "ENOENT")
      console.error(`tend-js-build: ${name} not found: put ${resolve(sdk, "..", "..", "target/npm/node_modules/.bin")} on PATH (\`cargo xtask lang js\` installs it there)`);
    else console.error(`tend-js-build: ${name} failed (${e.status ?? e.signal})`);
    process.exit(1);
  }
}

const work = mkdtempSync(join(tmpdir(), "tend-js-build-"));
try {
  const entry = join(work, "entry.js");
  writeFileSync(
    entry,
    `import plugin from ${JSON.stringify(resolve(plugin))};\n` +
      `import { exportPlugin } from ${JSON.stringify(join(sdk, "src", "component.js"))};\n` +
      "export const reconciler = exportPlugin(plugin);\n",
  );
  const bundle = join(work, "bundle.js");
  tool("esbuild", [entry, "--bundle", "--format=esm", "--platform=neutral", "--log-level=warning",
    "--external:tend:plugin/*", `--alias:@tend/sdk=${join(sdk, "src", "index.js")}`, `--outfile=${bundle}`]);
  tool("componentize-qjs", ["--wit", wit, "--world", "plugin", "--js", bundle, "--sync",
    ...(optSize ? ["--opt-size"] : []), "-o", resolve(out)]);
} finally {
  rmSync(work, { recursive: true, force: true });
}
