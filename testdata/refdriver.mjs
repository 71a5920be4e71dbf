#!/usr/bin/env node
// refdriver: runs one request against the Node.js reference claim store.
//
// Usage: node testdata/refdriver.mjs < request.json > response.json
//
// The Go tests use it for live cross-implementation checks, and
// testdata/reference/gen.mjs uses it to write the txtar fixtures. The
// reference lives outside this repository and is never copied here: it is
// found at $CLAIMSTORE_REFERENCE, or by default at ../shared/reference
// relative to the repository root (where CI puts its read-only copy).
//
// Everything that could make two runs differ is injected, so the same
// request gives byte-identical results: the host facts, the process table
// (pid -> start ticks; only pids missing from it reach the real kill(pid, 0)),
// and a clock that starts at `now` and advances 1 ms per reading. Temporary
// file names stay random: the reference names them itself, and no result
// mentions them.
//
// The request and response schemas are in testdata/reference/README.md.

import { readFileSync, mkdirSync, writeFileSync, rmSync, unlinkSync } from "node:fs";
import { createHash } from "node:crypto";
import { dirname, join, relative, resolve, isAbsolute, sep } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const reference = resolve(process.env.CLAIMSTORE_REFERENCE || join(here, "..", "..", "shared", "reference"));
const claimModule = join(reference, "stack/packages/conversation/src/claim.mjs");
let ref; // the reference module, loaded in main() so a bad path is reported as a response

const BARRIERS = ["temp-written", "temp-synced", "linked", "dir-synced", "between-keys"];

function fail(message) {
  const err = new Error(message);
  err.code = "driver";
  return err;
}

// The hash exactly as claim.mjs computes it (keyHash is not exported).
function keyHash(key) {
  const json = JSON.stringify(key);
  return { json, hash: createHash("sha256").update(json).digest("hex").slice(0, 32) };
}

// Keys always go through the reference's own constructors, so member order
// is the reference's and not whatever order the request happened to use.
function seatOf(s) {
  if (!s || typeof s !== "object") throw fail("a seat {seat, project, workspace} is required");
  return ref.seatKey(s);
}
function sessionOf(id) {
  if (typeof id !== "string") throw fail("a session id string is required");
  return ref.sessionKey(id);
}
function keyOf(op) {
  if (op.key) return op.key.kind === "seat" ? ref.seatKey(op.key) : ref.sessionKey(op.key.session);
  if (op.seat) return seatOf(op.seat);
  if (op.session !== undefined) return sessionOf(op.session);
  throw fail(`${op.op} needs "seat", "session" or "key"`);
}

function describeHead(h) {
  return { n: h.n, damaged: h.damaged, state: ref.headState(h), held: ref.held(h), record: h.record };
}

// A path inside the root, refusing anything that would escape it: the
// damage-crafting ops must never touch files outside the fixture.
function inside(root, rel) {
  if (typeof rel !== "string" || !rel || isAbsolute(rel)) throw fail("path must be relative to the root");
  const abs = resolve(root, rel);
  if (!abs.startsWith(root + sep)) throw fail(`path ${rel} leaves the root`);
  return abs;
}

async function main() {
  try {
    ref = await import(pathToFileURL(claimModule).href);
  } catch (err) {
    throw Object.assign(new Error(`cannot load the reference at ${claimModule} (set CLAIMSTORE_REFERENCE): ${err.message}`), { code: "driver" });
  }
  const req = JSON.parse(readFileSync(0, "utf8"));
  const root = req.root ? resolve(req.root) : null;
  const host = req.host ?? {};
  const processes = req.processes ?? {};

  let clock = Date.parse(req.now ?? "2026-01-01T00:00:00.000Z");
  if (Number.isNaN(clock)) throw fail(`bad now: ${req.now}`);
  const now = () => new Date(clock++);

  // Barrier hooks: a stopAt or interleave op loads `next`; the op after it
  // runs with it armed, and it is disarmed afterwards whether or not the
  // barrier came. stopAt throws there, as a crash would; interleave runs
  // other ops there (a competing writer) and lets the op go on.
  let next = null, armed = null;
  const barrier = async (name) => {
    if (!armed || armed.barrier !== name) return;
    armed.seen++;
    if (armed.seen !== armed.nth) return;
    const hit = armed;
    armed = null; // the nested ops run unhooked
    if (!hit.ops) throw new Error("crash");
    hit.results = [];
    for (const op of hit.ops) hit.results.push(await step(op));
  };

  const store = root && new ref.ClaimStore({
    root,
    host: { machineId: () => host.machineId ?? null, bootId: () => host.bootId ?? null },
    // boot: null keeps ownerState off the real boot id; pids missing from
    // the table fall through to a real kill(pid, 0) in the reference.
    identity: (pid) => ({ start: processes[String(pid)] ?? null, boot: null }),
    barrier,
    now,
  });
  const needStore = (op) => {
    if (!store) throw fail(`${op.op} needs "root"`);
    return store;
  };

  const claims = new Map();
  // A claim named by id, or rebuilt from disk when the request also gives
  // both keys (a root written by another request or implementation).
  const claimFor = (op) => {
    if (claims.has(op.claimId)) return claims.get(op.claimId);
    if (op.seat && op.session !== undefined) {
      const s = needStore(op);
      const seatK = seatOf(op.seat), sessionK = sessionOf(op.session);
      const a = s.head(seatK), b = s.head(sessionK);
      if (a.damaged || b.damaged || !a.record || !b.record) throw fail("cannot rebuild a claim from a damaged or empty key");
      const claim = { claimId: op.claimId, seatKey: seatK, sessionKey: sessionK, n: { seat: a.n, session: b.n }, record: a.record };
      claims.set(op.claimId, claim);
      return claim;
    }
    throw fail(`unknown claim ${op.claimId}`);
  };
  const view = (c) => ({ claimId: c.claimId, n: { ...c.n }, record: c.record });

  const run = async (op) => {
    switch (op.op) {
      case "acquire": {
        const c = await needStore(op).acquire(seatOf(op.seat), sessionOf(op.session), op.fields ?? {});
        claims.set(c.claimId, c);
        return view(c);
      }
      case "advance":
        return view(await needStore(op).advance(claimFor(op), op.patch ?? {}));
      case "release":
        return view(await needStore(op).advance(claimFor(op), { state: "stopped", proof: op.proof }));
      case "stopAt":
        if (!BARRIERS.includes(op.barrier)) throw fail(`unknown barrier ${op.barrier}`);
        next = { barrier: op.barrier, nth: op.nth ?? 1, seen: 0 };
        return {};
      case "interleave":
        if (!BARRIERS.includes(op.barrier)) throw fail(`unknown barrier ${op.barrier}`);
        if (!Array.isArray(op.ops)) throw fail("interleave needs ops");
        next = { barrier: op.barrier, nth: op.nth ?? 1, seen: 0, ops: op.ops };
        return {};
      case "head":
        return describeHead(needStore(op).head(keyOf(op)));
      case "revisions":
        return {
          revisions: needStore(op).revisions(keyOf(op)).map(({ name, text }) => {
            let record = null;
            try { record = JSON.parse(text); } catch { /* torn: text says it all */ }
            return { name, text, record };
          }),
        };
      case "classify": {
        const units = op.units ?? {};
        const res = await needStore(op).classify(seatOf(op.seat), sessionOf(op.session), {
          units: { lookup: async (record) => ({ state: units[record.unitName] ?? "absent" }) },
          bootProof: op.bootProof ? async () => ({ proof: { id: op.bootProof.id }, effects: null }) : null,
          adopt: op.adopt ?? null,
          stoppedPatch: op.stoppedPatch ?? {},
        });
        const { claim, ...rest } = res; // the live claim object is not data
        return rest;
      }
      case "write": {
        needStore(op);
        const abs = inside(root, op.path);
        mkdirSync(dirname(abs), { recursive: true, mode: 0o700 });
        rmSync(abs, { force: true }); // revision files are 0400: replace, don't open for write
        const data = op.base64 !== undefined ? Buffer.from(op.base64, "base64") : Buffer.from(op.content ?? "", "utf8");
        writeFileSync(abs, data, { mode: 0o400, flag: "wx" });
        return {};
      }
      case "copy": {
        // A byte copy of an existing file: a revision under a wrong name or
        // in another key's directory is valid JSON but a damaged revision.
        needStore(op);
        const abs = inside(root, op.path);
        mkdirSync(dirname(abs), { recursive: true, mode: 0o700 });
        rmSync(abs, { force: true });
        writeFileSync(abs, readFileSync(inside(root, op.from)), { mode: 0o400, flag: "wx" });
        return {};
      }
      case "remove":
        needStore(op);
        unlinkSync(inside(root, op.path));
        return {};
      case "keyhash": {
        const key = keyOf(op);
        const { json, hash } = keyHash(key);
        // dir() is the reference's own path; it must agree with our hash.
        const dir = relative("/", new ref.ClaimStore({ root: "/" }).dir(key));
        if (dir !== `${key.kind}/${hash}`) throw fail(`keyHash mismatch: ${dir} vs ${hash}`);
        return { json, hash, dir };
      }
      default:
        throw fail(`unknown op ${op.op}`);
    }
  };

  async function step(op) {
    try {
      return { ok: true, ...(await run(op)) };
    } catch (err) {
      return { ok: false, code: err.code ?? null, message: err.message };
    }
  }

  const results = [];
  for (const op of req.ops ?? []) {
    const hook = op.op === "stopAt" || op.op === "interleave" ? null : next;
    if (hook) [armed, next] = [hook, null];
    const result = await step(op);
    if (hook?.results) result.interleaved = hook.results;
    results.push(result);
    armed = null;
  }
  process.stdout.write(JSON.stringify({ results }) + "\n");
}

main().catch((err) => {
  // A malformed request or an import failure: not an op result.
  process.stdout.write(JSON.stringify({ error: { code: err.code ?? null, message: err.message } }) + "\n");
  process.exitCode = 1;
});
