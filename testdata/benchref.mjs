#!/usr/bin/env node
// benchref: the reference implementation's lifecycle, timed in-process —
// acquire, active (spawn marked), stopping, release with a cohortProof, on
// two new keys per lifecycle, in one ClaimStore on a root given as the
// first argument. Prints one JSON line: {"lifecycles": N, "nsPerLifecycle": X}.
//
// Usage: node testdata/benchref.mjs ROOT N
// The reference is found as refdriver.mjs finds it ($CLAIMSTORE_REFERENCE,
// default ../shared/reference). scripts/bench-reference runs it beside the
// Go benchmark and prints the ratio.
import { dirname, join, resolve } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const reference = resolve(process.env.CLAIMSTORE_REFERENCE || join(here, "..", "..", "shared", "reference"));
const ref = await import(pathToFileURL(join(reference, "stack/packages/conversation/src/claim.mjs")).href);

const [root, nArg] = process.argv.slice(2);
const n = Number(nArg || 50);
const s = new ref.ClaimStore({ root });
async function lifecycle(i) {
  const c = await s.acquire(ref.seatKey({ seat: `s${i}`, project: "p", workspace: "/w" }), ref.sessionKey(`x${i}`), { owner: s.owner(1), generation: 1, pins: [] });
  await s.advance(c, { state: "active", spawnMarker: true });
  await s.advance(c, { state: "stopping" });
  await s.advance(c, { state: "stopped", proof: { kind: "cohortProof", ref: "bench" } });
}
await lifecycle(-1); // warm: root and kind directories exist
const t0 = process.hrtime.bigint();
for (let i = 0; i < n; i++) await lifecycle(i);
const dt = process.hrtime.bigint() - t0;
console.log(JSON.stringify({ lifecycles: n, nsPerLifecycle: Number(dt) / n }));
