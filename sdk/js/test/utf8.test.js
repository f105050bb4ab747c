// The SDK's UTF-8 (QuickJS has no TextEncoder) agrees with Node's.

import assert from "node:assert/strict";
import { test } from "node:test";
import { decodeUtf8, encodeUtf8 } from "../src/utf8.js";

const TEXTS = ["", "runs", "héllo wörld", "日本語", "😀 and 𝄞", "a\u0000b", "lone \ud800 high", "lone \udc00 low", "\ud83d"];

test("encodes as TextEncoder does", () => {
  for (const text of TEXTS) assert.deepEqual(encodeUtf8(text), new TextEncoder().encode(text), JSON.stringify(text));
});

test("decodes as TextDecoder does, invalid bytes included", () => {
  const decoder = new TextDecoder();
  const samples = TEXTS.map((t) => new TextEncoder().encode(t));
  // Truncated, overlong, surrogate, out of range and stray continuation bytes.
  for (const bad of [[0xc3], [0xe6, 0x97], [0xc0, 0x80], [0xe0, 0x80, 0x80], [0xed, 0xa0, 0x80], [0xf4, 0x90, 0x80, 0x80], [0x80, 0x41], [0xff, 0xfe], [0xf0, 0x9f, 0x98, 0x41]])
    samples.push(Uint8Array.from(bad));
  for (let b = 0; b < 256; b++) samples.push(Uint8Array.from([b, 0x80, 0x80, 0x80, 0x41]));
  for (const bytes of samples) assert.equal(decodeUtf8(bytes), decoder.decode(bytes), `${[...bytes]}`);
});
