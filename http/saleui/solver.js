// The sale page's solver: a Web Worker that solves an ALTCHA challenge
// (protocol v1) off the page's thread, so that the page stays responsive
// and can show progress. It finds the number n in [0, maxnumber] whose
// SHA-256 of salt followed by n in decimal is the challenge.
//
// In: {algorithm, challenge, maxnumber, salt}. Out: {progress: 0..1} now
// and then, then {number, tookMs}, or {error}.
"use strict";

// BATCH digests are asked for at once: crypto.subtle answers each through
// a promise, and many in flight cost far less than one after the other.
const BATCH = 64;

self.onmessage = async (event) => {
  const { algorithm, challenge, maxnumber, salt } = event.data;
  if (algorithm !== "SHA-256") {
    self.postMessage({ error: "unknown algorithm " + algorithm });
    return;
  }
  if (!self.crypto || !self.crypto.subtle) {
    // crypto.subtle exists only in a secure context: HTTPS, or localhost.
    self.postMessage({ error: "this browser cannot solve the check here: open the page over HTTPS" });
    return;
  }
  const want = hexBytes(challenge);
  if (want === null || !Number.isSafeInteger(maxnumber) || maxnumber < 0) {
    self.postMessage({ error: "the check is malformed" });
    return;
  }
  const enc = new TextEncoder();
  const start = performance.now();
  let reported = start;
  for (let n = 0; n <= maxnumber; n += BATCH) {
    const last = Math.min(n + BATCH - 1, maxnumber);
    const sums = [];
    for (let i = n; i <= last; i++) {
      sums.push(self.crypto.subtle.digest("SHA-256", enc.encode(salt + i)));
    }
    const got = await Promise.all(sums);
    for (let i = 0; i < got.length; i++) {
      if (equal(new Uint8Array(got[i]), want)) {
        self.postMessage({ number: n + i, tookMs: Math.round(performance.now() - start) });
        return;
      }
    }
    const now = performance.now();
    if (now - reported >= 100) {
      reported = now;
      self.postMessage({ progress: last / Math.max(maxnumber, 1) });
    }
  }
  self.postMessage({ error: "no number solves the check" });
};

// hexBytes reads a hex SHA-256 (64 digits); null if it is not one.
function hexBytes(hex) {
  if (typeof hex !== "string" || !/^[0-9a-fA-F]{64}$/.test(hex)) return null;
  const out = new Uint8Array(32);
  for (let i = 0; i < 32; i++) out[i] = parseInt(hex.substr(2 * i, 2), 16);
  return out;
}

function equal(a, b) {
  for (let i = 0; i < b.length; i++) if (a[i] !== b[i]) return false;
  return true;
}
