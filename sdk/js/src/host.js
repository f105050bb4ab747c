// The typed wrappers over every capability, built from src/wit.js so each
// WIT function is there under its camelCase name with its parameters checked;
// how a call reaches a host (the engine's imports, or the fakes) is the
// caller's `call(cap, fn, args, sig)`: `args` checked and in WIT order,
// `sig.params` their `[WIT name, type]`, `sig.ok` the type of the answer (the
// `T` of a `result<T, error>`, whose error the call throws as a TendError).

import { IMPORTS } from "./wit.js";
import { parseType, prepare } from "./codec.js";
import { camel } from "./names.js";

/** The `Host` of src/wit.d.ts over `call`. */
export function makeHost(call) {
  const host = {};
  for (const [cap, funcs] of Object.entries(IMPORTS)) {
    const wrappers = {};
    for (const [fn, sig] of Object.entries(funcs)) {
      const name = `${cap}.${camel(fn)}`;
      const params = Object.entries(sig.params).map(([p, t]) => [p, parseType(t)]);
      const result = sig.result && parseType(sig.result);
      const parsed = { params, ok: result?.result ? result.result[0] : result };
      wrappers[camel(fn)] = (...args) => {
        if (args.length > params.length)
          throw new TypeError(`${name}: takes ${params.length} arguments, got ${args.length}`);
        const prepared = params.map(([p, t], i) => prepare(t, args[i], `${name}: ${camel(p)}`));
        return call(cap, fn, prepared, parsed);
      };
    }
    host[camel(cap)] = wrappers;
  }
  return host;
}
