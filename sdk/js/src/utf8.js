// UTF-8 without TextEncoder/TextDecoder, which the QuickJS engine plugins
// run on does not have: state values, file contents and bodies are bytes.

/** The UTF-8 bytes of a string (a lone surrogate becomes U+FFFD, as TextEncoder does). */
export function encodeUtf8(text) {
  const out = [];
  for (let i = 0; i < text.length; i++) {
    let c = text.charCodeAt(i);
    if (c >= 0xd800 && c <= 0xdbff && i + 1 < text.length) {
      const low = text.charCodeAt(i + 1);
      if (low >= 0xdc00 && low <= 0xdfff) {
        c = 0x10000 + ((c - 0xd800) << 10) + (low - 0xdc00);
        i++;
      }
    }
    if (c >= 0xd800 && c <= 0xdfff) c = 0xfffd;
    if (c < 0x80) out.push(c);
    else if (c < 0x800) out.push(0xc0 | (c >> 6), 0x80 | (c & 63));
    else if (c < 0x10000) out.push(0xe0 | (c >> 12), 0x80 | ((c >> 6) & 63), 0x80 | (c & 63));
    else out.push(0xf0 | (c >> 18), 0x80 | ((c >> 12) & 63), 0x80 | ((c >> 6) & 63), 0x80 | (c & 63));
  }
  return Uint8Array.from(out);
}

/** The text of UTF-8 bytes; each invalid sequence becomes U+FFFD, as TextDecoder does. */
export function decodeUtf8(bytes) {
  let out = "";
  for (let i = 0; i < bytes.length; ) {
    const b = bytes[i];
    // Bytes to follow, and the range of the first of them (which excludes
    // overlong forms, surrogates and code points past U+10FFFF).
    const [need, lo, hi] =
      b < 0x80
        ? [0, 0, 0]
        : b >= 0xc2 && b <= 0xdf
          ? [1, 0x80, 0xbf]
          : b >= 0xe0 && b <= 0xef
            ? [2, b === 0xe0 ? 0xa0 : 0x80, b === 0xed ? 0x9f : 0xbf]
            : b >= 0xf0 && b <= 0xf4
              ? [3, b === 0xf0 ? 0x90 : 0x80, b === 0xf4 ? 0x8f : 0xbf]
              : [-1];
    if (need < 0) {
      out += "\ufffd";
      i++;
      continue;
    }
    let c = need === 0 ? b : b & (0x3f >> need);
    let j = 1;
    for (; j <= need; j++) {
      const next = bytes[i + j];
      const [l, h] = j === 1 ? [lo, hi] : [0x80, 0xbf];
      if (next === undefined || next < l || next > h) break;
      c = (c << 6) | (next & 63);
    }
    if (j <= need) {
      out += "\ufffd";
      i += j; // the bytes read so far are one maximal invalid subpart
      continue;
    }
    out += String.fromCodePoint(c);
    i += need + 1;
  }
  return out;
}
