#!/usr/bin/env node
// Regenerates testdata/keyhash.json and testdata/reference/*.txtar from the
// Node.js reference claim store, through testdata/refdriver.mjs.
//
//   node testdata/reference/gen.mjs [REFERENCE_DIR]
//
// REFERENCE_DIR (or $CLAIMSTORE_REFERENCE) defaults to ../shared/reference
// beside the repository. Nothing is fetched. Every input is fixed (ids,
// host facts, process table, clock), so a second run is byte-identical.
//
// Each scenario is written in two steps, as a real restart would see it:
// a writer request leaves a root in some state (often cut at a barrier),
// then a classifier request, possibly with another boot or process table,
// classifies the pair. The root before classify goes into the txtar; the
// classifier's answer and what it published go into the comment. Each
// fixture is then re-materialised from its own text into a fresh root and
// classified again, and must give the same answer.

import { spawnSync } from "node:child_process";
import { createHash } from "node:crypto";
import { mkdtempSync, mkdirSync, readdirSync, readFileSync, renameSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, relative, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { isDeepStrictEqual } from "node:util";

const here = dirname(fileURLToPath(import.meta.url));
const testdata = resolve(here, "..");
const repo = resolve(testdata, "..");
const driver = join(testdata, "refdriver.mjs");
const reference = resolve(process.argv[2] || process.env.CLAIMSTORE_REFERENCE || join(repo, "..", "shared", "reference"));

function check(cond, what) {
  if (!cond) throw new Error(`check failed: ${what}`);
}

function drive(request) {
  const out = spawnSync(process.execPath, [driver], {
    input: JSON.stringify(request),
    env: { ...process.env, CLAIMSTORE_REFERENCE: reference },
    encoding: "utf8",
  });
  if (out.status !== 0) throw new Error(`driver failed (${out.status}): ${out.stdout}${out.stderr}`);
  return JSON.parse(out.stdout);
}

const keyHash = (key) => createHash("sha256").update(JSON.stringify(key)).digest("hex").slice(0, 32);
const seatKey = ({ seat, project, workspace }) => ({ kind: "seat", seat, project, workspace });
const sessionKey = (session) => ({ kind: "session", session });
const seatDir = (s) => `seat/${keyHash(seatKey(s))}`;
const sessionDir = (id) => `session/${keyHash(sessionKey(id))}`;
const rev = (n) => `r${String(n).padStart(10, "0")}.json`;

// ---------------------------------------------------------------- keyhash.json

function keyhashVectors() {
  const vectors = [];
  const seat = (name, seat, project = "proj", workspace = "ws") => vectors.push({ name, key: seatKey({ seat, project, workspace }) });
  const session = (name, id) => vectors.push({ name, key: sessionKey(id) });

  seat("seat-ascii", "seat-1", "project-a", "/home/dev/ws");
  session("session-ascii", "sess-0001");
  session("session-uuid", "0b6f5a52-3c1e-4f0b-9d2a-7e8c1f4a9b31");
  session("html-lt-gt-amp", "<script>a && b</script>");
  seat("seat-html-every-member", "<seat>", "a&b", "x>y<z");
  session("double-quote", 'say "hi"');
  session("backslash", "C:\\path\\to\\ws");
  session("quote-backslash-mix", 'a\\"b\\\\c"\\');
  session("json-lookalike", '{"kind":"session"}');
  session("literal-backslash-u", "\\u00e9\\n");
  for (let c = 1; c <= 0x1f; c++) {
    session(`control-0x${c.toString(16).padStart(2, "0")}`, `a${String.fromCharCode(c)}b`);
  }
  session("control-all", Array.from({ length: 31 }, (_, i) => String.fromCharCode(i + 1)).join(""));
  session("del-0x7f", "a\u007fb");
  session("c1-controls-0x80-0x9f", "a\u0080\u0085\u009fb");
  session("line-separator-u2028", "a\u2028b");
  session("paragraph-separator-u2029", "a\u2029b");
  session("latin1-e-acute", "café");
  session("e-combining-acute", "cafe\u0301");
  session("nbsp-and-bom", "a\u00a0b\ufeffc");
  session("replacement-char-and-uffff", "a\ufffdb\uffffc");
  session("cjk", "日本語");
  seat("seat-cjk-every-member", "席", "プロジェクト", "作業/空間");
  session("emoji-surrogate-pair", "😀");
  session("astral-music-g-clef", "𝄞 clef");
  session("emoji-zwj-sequence", "👩‍💻");
  session("flag-regional-indicators", "🇫🇷");
  session("slash", "a/b/c");
  session("slash-and-dot-dot", "../../etc/passwd");
  session("space-only", " ");
  session("digits", "0123456789");
  session("long-1000-ascii", "x".repeat(1000));
  session("long-1000-e-acute", "é".repeat(1000));
  seat("seat-long-members", "s".repeat(300), "p".repeat(300), "w".repeat(300));
  seat("seat-mixed-everything", "<a\"b\\c>\n\t\u2028", "é😀&/", "\u001b[31m\u007f日本");
  session("mixed-everything", "<>&\"\\/\b\f\n\r\t" + "\u000b\u001f\u007f\u2028\u2029é日😀");

  const res = drive({ ops: vectors.map((v) => ({ op: "keyhash", key: v.key })) });
  const out = vectors.map((v, i) => {
    const r = res.results[i];
    check(r.ok, `keyhash ${v.name}: ${r.message}`);
    check(!r.json.includes("\u0000") && r.json === JSON.stringify(v.key) && r.hash === keyHash(v.key), `keyhash ${v.name}`);
    return { name: v.name, key: v.key, json: r.json, hash: r.hash };
  });
  check(new Set(out.map((v) => v.name)).size === out.length, "vector names unique");
  return JSON.stringify(out, null, 2) + "\n";
}

// ---------------------------------------------------------------- scenarios

const M1 = "3f6c2a9e8d7b41c0a5e4f3d2c1b0a998"; // the classifying machine
const M2 = "b7e1d2c3a4f5061728394a5b6c7d8e9f"; // another machine
const B1 = "5b0c9a3e-2f1d-4c8b-9e7a-1d2c3b4a5f60"; // the writer's boot
const B2 = "8e7d6c5b-4a39-4281-9f0e-d1c2b3a49586"; // a later boot
const CA = "c5f3e1a09b7d4c2e8f6a1b3d5";
const CB = "c9a8b7c6d5e4f30211a2b3c4d";
for (const id of [CA, CB]) check(/^c[0-9a-f]{24}$/.test(id), `claim id ${id}`);
for (const id of [M1, M2]) check(/^[0-9a-f]{32}$/.test(id), `machine id ${id}`);

const SEAT = { seat: "seat-1", project: "proj", workspace: "/home/dev/ws" };
const SESSION = "sess-0001";
const SEAT2 = { seat: "seat-2", project: "proj", workspace: "/home/dev/ws" };
const SESSION2 = "sess-0002";
const SEAT3 = { seat: "seat-3", project: "proj", workspace: "/home/dev/ws" };
const PID = 4100, START = "88001";

const T_WRITE = "2026-01-01T00:00:00.000Z";
const T_CLASSIFY = "2026-01-02T00:00:00.000Z";

const writerHost = { machineId: M1, bootId: B1 };
const writerProcs = { [PID]: START };
const LIVE = { [PID]: START }; // same pid, same start: the owner still runs
const GONE = { [PID]: "99999" }; // same pid, another start: the pid was reused

const fields = (over = {}) => ({
  claimId: CA, bindingId: "bind-1", harness: "claude-code", conversation: "conv-1",
  branch: "main", leaf: "leaf-1", pins: ["pin-a"], generation: 1,
  owner: { pid: PID, start: START, incarnation: 1 },
  ...over,
});
const acquire = (over = {}, seat = SEAT, session = SESSION) => ({ op: "acquire", seat, session, fields: fields(over) });
const advance = (patch, claimId = CA) => ({ op: "advance", claimId, patch });
const release = (proof, claimId = CA) => ({ op: "release", claimId, proof });
const stopAt = (barrier, nth = 1) => ({ op: "stopAt", barrier, nth });
const unitOf = (id) => `mosaic-chat-${id}`;

// Each scenario: writer ops (an op right after stopAt must crash; every
// other op must succeed) and the classify request; `want` is checked
// against the reference's answer so a scenario cannot silently drift to
// another branch of classify.
const scenarios = [
  {
    name: "free-never-held",
    description: "Neither key has a revision: classify answers free and publishes nothing (§6.1).",
    ops: [],
    classify: { processes: GONE },
    want: { state: "free" }, published: 0,
  },
  {
    name: "free-released",
    description: "A claim acquired, advanced to active and released with a cohortProof: both heads are stopped with a proof, so the pair is free (§6.1).",
    ops: [acquire(), advance({ state: "active", spawnMarker: true, invocationId: "inv-1" }), release({ kind: "cohortProof", ref: "cohort-1" })],
    classify: { processes: GONE },
    want: { state: "free" }, published: 0,
  },
  {
    name: "foreign-host",
    description: "The pair is held (active) by a claim written on another machine id: uncertain with refusal foreign-host, nothing published, whatever the process table says (§6.2).",
    writer: { host: { machineId: M2, bootId: B1 } },
    ops: [acquire(), advance({ state: "active" })],
    classify: { processes: GONE },
    want: { state: "uncertain", refusal: "foreign-host" }, published: 0,
  },
  {
    name: "damaged-head-torn",
    description: "The seat key's highest revision (r2) is torn JSON: a prefix of a record plus a newline (txtar needs the final newline; the bytes are not JSON either way). Uncertain, unsafe-replacement, damaged; nothing published; r1 is not used in its place (§3, §6.3).",
    ops: [acquire(), { op: "write", path: `${seatDir(SEAT)}/${rev(2)}`, content: `{"version":1,"kind":"writer-claim","claimId":"${CA}","bindingId":"bi\n` }],
    classify: { processes: GONE },
    want: { state: "uncertain", refusal: "unsafe-replacement", damaged: true }, published: 0,
  },
  {
    name: "damaged-head-revision-mismatch",
    description: "The seat key's r2 is a byte copy of its r1: valid JSON but its revision member (1) differs from the file name (2), so it is damaged (§2, §6.3).",
    ops: [acquire(), { op: "copy", from: `${seatDir(SEAT)}/${rev(1)}`, path: `${seatDir(SEAT)}/${rev(2)}` }],
    classify: { processes: GONE },
    want: { state: "uncertain", refusal: "unsafe-replacement", damaged: true }, published: 0,
  },
  {
    name: "damaged-head-wrong-key",
    description: "The seat key's only revision is a byte copy of another seat key's r1 (claim B on seat-2): revision number right, key member wrong, so it is damaged; the session key is free (§2, §6.3).",
    ops: [acquire({ claimId: CB }, SEAT2, SESSION2), { op: "copy", from: `${seatDir(SEAT2)}/${rev(1)}`, path: `${seatDir(SEAT)}/${rev(1)}` }],
    classify: { processes: GONE },
    want: { state: "uncertain", refusal: "unsafe-replacement", damaged: true }, published: 0,
  },
  {
    name: "mixed-claim-ids",
    description: "The seat key is held by claim A (acquired with seat-1 and sess-0099) and the session key by claim B (acquired with seat-2 and sess-0001); every record is a valid reference record. Uncertain, unsafe-replacement, nothing published (§6.4).",
    ops: [acquire({}, SEAT, "sess-0099"), acquire({ claimId: CB, owner: { pid: PID, start: START, incarnation: 2 } }, SEAT2, SESSION)],
    classify: { processes: GONE },
    want: { state: "uncertain", refusal: "unsafe-replacement" }, published: 0,
  },
  {
    name: "owner-live",
    description: "Active claim, same boot; the process table still shows the owner's pid with the recorded start: already-active, nothing published (§6.6).",
    ops: [acquire(), advance({ state: "active", spawnMarker: true })],
    classify: { processes: LIVE },
    want: { state: "active", refusal: "already-active" }, published: 0,
  },
  {
    name: "owner-unknown",
    description: "The owner was recorded without a start time (start null); its pid is in the table: owner state unknown, which fails closed as already-active (§6.6, §7).",
    ops: [acquire({ owner: { pid: PID, start: null, incarnation: 1 } })],
    classify: { processes: GONE },
    want: { state: "reserved", refusal: "already-active" }, published: 0,
  },
  {
    name: "owner-invalid-pid0",
    description: "The owner was recorded with pid 0: owner state invalid, already-active, nothing published (§6.6, §7).",
    ops: [acquire({ owner: { pid: 0, start: START, incarnation: 1 } })],
    classify: { processes: GONE },
    want: { state: "reserved", refusal: "already-active" }, published: 0,
  },
  {
    name: "owner-missing",
    description: "The record has no owner member at all (acquire without an owner): owner state invalid, already-active (§6.6).",
    ops: [acquire({ owner: undefined })],
    classify: { processes: GONE },
    want: { state: "reserved", refusal: "already-active" }, published: 0,
  },
  {
    name: "other-boot-boot-proof",
    description: "Active claim with a spawn marker written in boot B1; the classifier runs in boot B2 on the same machine, the owner's pid was reused, and a boot-proof issuer answers bp-1: stopped with a boot proof on both keys, marker kept (§6.7).",
    ops: [acquire(), advance({ state: "active", spawnMarker: true, invocationId: "inv-1" })],
    classify: { host: { machineId: M1, bootId: B2 }, processes: GONE, bootProof: { id: "bp-1" } },
    want: { state: "stopped", proofKind: "boot" }, published: 2,
  },
  {
    name: "other-boot-no-issuer",
    description: "As other-boot-boot-proof but without a boot-proof issuer: uncertain, needs boot-proof, nothing published (§6.7).",
    ops: [acquire(), advance({ state: "active", spawnMarker: true, invocationId: "inv-1" })],
    classify: { host: { machineId: M1, bootId: B2 }, processes: GONE },
    want: { state: "uncertain", refusal: "unsafe-replacement", needs: "boot-proof" }, published: 0,
  },
  {
    name: "release-cut-between-keys",
    description: "A release (cohortProof cohort-7) crashed at between-keys: the seat key is stopped with the proof, the session key still active. Same boot, owner gone: classify finishes the session key with the same proof, completed (§6.8).",
    ops: [acquire(), advance({ state: "active", spawnMarker: true, invocationId: "inv-1" }), stopAt("between-keys"), release({ kind: "cohortProof", ref: "cohort-7" })],
    classify: { processes: GONE },
    want: { state: "stopped", proofKind: "cohortProof", completed: true }, published: 1,
  },
  {
    name: "reserved-no-unit",
    description: "Reserved on both keys, no spawn marker, owner gone, unit absent: stopped with a no-unit proof on both keys (§6.9).",
    ops: [acquire()],
    classify: { processes: GONE },
    want: { state: "stopped", proofKind: "no-unit" }, published: 2,
  },
  {
    name: "reserved-unit-alive",
    description: "Reserved, no spawn marker, owner gone, but the claim's unit exists: uncertain published on both keys (§6.10).",
    ops: [acquire()],
    classify: { processes: GONE, units: { [unitOf(CA)]: "alive" } },
    want: { state: "uncertain", adopted: false }, published: 2,
  },
  {
    name: "reserved-unit-unknown",
    description: "Reserved, no spawn marker, owner gone, the unit lookup answers unknown: uncertain published on both keys (§6.10).",
    ops: [acquire()],
    classify: { processes: GONE, units: { [unitOf(CA)]: "unknown" } },
    want: { state: "uncertain", adopted: false }, published: 2,
  },
  {
    name: "active-marker-unit-absent",
    description: "Active with a spawn marker, owner gone, unit absent: an absent unit after a spawn is no proof; uncertain published on both keys with the marker copied forward (§6.10).",
    ops: [acquire(), advance({ state: "active", spawnMarker: true, invocationId: "inv-1" })],
    classify: { processes: GONE },
    want: { state: "uncertain", adopted: false }, published: 2,
  },
  {
    name: "stopped-without-proof",
    description: "Both heads are stopped but without a proof (advance to stopped with no proof): they read as uncertain and stay held; owner gone, unit absent: uncertain published (§3, §6.10).",
    ops: [acquire(), advance({ state: "active", spawnMarker: true }), advance({ state: "stopped" })],
    classify: { processes: GONE },
    want: { state: "uncertain", adopted: false }, published: 2,
  },
  {
    name: "stopping-in-flight-unit-alive",
    description: "Stopping with a stop request recorded, owner gone, unit alive: stays stopping and hands the stop back as resumeStop. The heads already say stopping with the same proof, marker and owner, so the reference publishes nothing (§6.10).",
    ops: [acquire(), advance({ state: "active", spawnMarker: true, invocationId: "inv-1" }), advance({ state: "stopping", stop: { requestedAt: "2026-01-01T00:00:00.500Z", reason: "operator", by: "claimctl" } })],
    classify: { processes: GONE, units: { [unitOf(CA)]: "alive" } },
    want: { state: "stopping", adopted: false }, published: 0,
  },
  {
    name: "adopt-same-owner",
    description: "The caller adopts exactly the recorded owner (same pid and incarnation): owned, nothing published; the owner state is not even consulted (§6.5).",
    ops: [acquire(), advance({ state: "active", spawnMarker: true })],
    classify: { processes: LIVE, adopt: { pid: PID, incarnation: 1 } },
    want: { state: "owned" }, published: 0,
  },
  {
    name: "adopt-new-owner",
    description: "Active with a marker, owner gone, unit alive, and the caller adopts a different owner (new pid and incarnation): uncertain published on both keys with the adopted owner (§6.10).",
    ops: [acquire(), advance({ state: "active", spawnMarker: true, invocationId: "inv-1" })],
    classify: { processes: { ...GONE, 4200: "91000" }, units: { [unitOf(CA)]: "alive" }, adopt: { pid: 4200, start: "91000", incarnation: 2 } },
    want: { state: "uncertain", adopted: true }, published: 2,
  },
  {
    name: "acquire-cut-between-keys",
    description: "An acquire crashed at between-keys: the seat key is reserved, the session key has no revision. Same boot, owner gone, unit absent: stopped with no-unit on the seat key, and the free session key gains a stopped no-unit revision r1 of this claim too (§6.9).",
    ops: [stopAt("between-keys"), acquire()],
    classify: { processes: GONE },
    want: { state: "stopped", proofKind: "no-unit" }, published: 2,
  },
  {
    name: "acquire-session-taken-between-keys",
    description: "Claim A's acquire is interleaved at between-keys by claim B (another writer) taking sess-0001 with seat-3. A's acquire then closes its own seat revision with stopped + no-unit (r2) and refuses already-active. Classify: the seat key is free, the session key is held by B (reserved), owner gone, unit absent: the reference stops B with no-unit on both keys of THIS pair, so seat-1 (a key B never held) gains a revision of claim B (§5, §6.9).",
    ops: [
      { op: "interleave", barrier: "between-keys", nth: 1, ops: [acquire({ claimId: CB, owner: { pid: PID, start: START, incarnation: 2 } }, SEAT3, SESSION)] },
      acquire(),
    ],
    refused: { 1: "already-active" },
    classify: { processes: GONE },
    want: { state: "stopped", proofKind: "no-unit", claimId: CB }, published: 2,
  },
  {
    name: "junk-files-ignored",
    description: "Reserved on both keys, plus files in the seat key directory whose names are not revision names (r2.json, an 11-digit name, a .bak copy, a stray temporary): the reference ignores them; owner gone, unit absent: stopped no-unit, published as r2 (§2).",
    ops: [
      acquire(),
      { op: "write", path: `${seatDir(SEAT)}/r2.json`, content: "junk\n" },
      { op: "write", path: `${seatDir(SEAT)}/r00000000009.json`, content: "junk\n" },
      { op: "copy", from: `${seatDir(SEAT)}/${rev(1)}`, path: `${seatDir(SEAT)}/${rev(7)}.bak` },
      { op: "write", path: `${seatDir(SEAT)}/.tmp-0123456789abcdef`, content: "{\"torn\":\n" },
      { op: "write", path: `${seatDir(SEAT)}/notes.txt`, content: "not a revision\n" },
    ],
    classify: { processes: GONE },
    want: { state: "stopped", proofKind: "no-unit" }, published: 2,
  },
  {
    name: "quirk-owner-boot-real",
    quirk: "The reference's ownerState compares a recorded owner.boot with the REAL boot id of the machine running it (/proc/sys/kernel/random/boot_id), not with the store's injected host.bootId. Here owner.boot is the writer's (fake) boot B1, the classifier is in the same boot B1 and the process table shows the owner live, yet the reference calls the owner gone and publishes stopped no-unit. A store that uses its own host facts answers already-active instead. This fixture records the reference's answer; assume the real boot id is never B1.",
    description: "Owner recorded with boot B1 (owner.boot set), classifier in boot B1 with the owner live in its process table: see quirk.",
    ops: [acquire({ owner: { pid: PID, start: START, boot: B1, incarnation: 1 } })],
    classify: { processes: LIVE },
    want: { state: "stopped", proofKind: "no-unit" }, published: 2,
  },
];

// Crashes inside an acquire's publish steps. The seat key's publish passes
// barriers 1..4 first, then the session key's; nth=2 cuts the session one.
for (const [barrier, key] of [
  ["temp-written", "seat"], ["temp-synced", "seat"], ["linked", "seat"], ["dir-synced", "seat"],
  ["temp-written", "session"], ["temp-synced", "session"], ["linked", "session"], ["dir-synced", "session"],
]) {
  const nth = key === "seat" ? 1 : 2;
  const seatLinked = key === "session" || barrier === "linked" || barrier === "dir-synced";
  const sessionLinked = key === "session" && (barrier === "linked" || barrier === "dir-synced");
  const leftover = barrier === "temp-written" || barrier === "temp-synced";
  scenarios.push({
    name: `acquire-crash-${barrier}-${key}`,
    description: `An acquire crashed at ${barrier} while publishing r1 on the ${key} key` +
      (leftover ? `, leaving its temporary (.tmp-*) in the ${key} key directory; the reference never removes it.` : ".") +
      ` Seat r1 ${seatLinked ? "exists" : "does not exist"}, session r1 ${sessionLinked ? "exists" : "does not exist"}. Same boot, owner gone, unit absent.` +
      (seatLinked ? " Classify publishes stopped no-unit on both keys (on a free session key too)." : " Neither key is held: free; the temporary stays."),
    ops: [stopAt(barrier, nth), acquire()],
    classify: { processes: GONE },
    want: seatLinked ? { state: "stopped", proofKind: "no-unit" } : { state: "free" },
    published: seatLinked ? 2 : 0,
  });
}

// ---------------------------------------------------------------- roots

function walk(root) {
  const files = {};
  const visit = (dir) => {
    const names = readdirSync(dir).sort();
    check(dir === root || names.length > 0, `empty directory ${relative(root, dir)} cannot be kept in txtar`);
    for (const name of names) {
      const abs = join(dir, name);
      if (statSync(abs).isDirectory()) visit(abs);
      else files[relative(root, abs)] = readFileSync(abs, "utf8");
    }
  };
  visit(root);
  return files;
}

// Temporary names are random in the reference; rename leftovers after their
// content so fixtures are stable. The reference ignores the name anyway.
function stableTemps(root) {
  for (const [rel, text] of Object.entries(walk(root))) {
    const base = rel.split("/").pop();
    if (!/^\.tmp-[0-9a-f]{16}$/.test(base) || base === ".tmp-0123456789abcdef") continue;
    const stable = `.tmp-${createHash("sha256").update(text).digest("hex").slice(0, 16)}`;
    renameSync(join(root, rel), join(root, dirname(rel), stable));
  }
}

function materialise(root, files) {
  for (const [rel, text] of Object.entries(files)) {
    const abs = join(root, rel);
    mkdirSync(dirname(abs), { recursive: true, mode: 0o700 });
    writeFileSync(abs, text, { mode: 0o400, flag: "wx" });
  }
}

// ---------------------------------------------------------------- txtar

function formatTxtar(comment, files) {
  let out = comment;
  for (const [name, text] of Object.entries(files)) {
    check(text.endsWith("\n"), `${name} must end with a newline to survive txtar`);
    check(!/^-- .* --$/m.test(text), `${name} holds a txtar marker line`);
    out += `-- ${name} --\n${text}`;
  }
  return out;
}

function parseTxtar(text) {
  const marker = /^-- (.+) --$/gm;
  const cuts = [...text.matchAll(marker)];
  const files = {};
  const comment = cuts.length ? text.slice(0, cuts[0].index) : text;
  cuts.forEach((m, i) => {
    const start = m.index + m[0].length + 1;
    files[m[1]] = text.slice(start, i + 1 < cuts.length ? cuts[i + 1].index : text.length);
  });
  return { comment, files };
}

// ---------------------------------------------------------------- one fixture

function classifyRequest(root, c) {
  return {
    root,
    host: c.host, processes: c.processes, now: c.now,
    ops: [
      { op: "classify", seat: c.seat, session: c.session, units: c.units, bootProof: c.bootProof, adopt: c.adopt },
      { op: "head", seat: c.seat },
      { op: "head", session: c.session },
    ],
  };
}

function headSummary(h) {
  return { n: h.n, state: h.state, held: h.held, damaged: h.damaged, claimId: h.record?.claimId ?? null, proofKind: h.record?.proof?.kind ?? null };
}

// Classifies `root` and reports the answer plus what changed on disk.
function classifyRoot(root, c) {
  const before = walk(root);
  const res = drive(classifyRequest(root, c));
  const [cl, seatHead, sessionHead] = res.results;
  check(cl.ok && seatHead.ok && sessionHead.ok, `classify ops: ${JSON.stringify(res)}`);
  const after = walk(root);
  for (const [rel, text] of Object.entries(before)) check(after[rel] === text, `classify changed or removed ${rel}`);
  const published = Object.keys(after).filter((rel) => !(rel in before));
  for (const rel of published) check(/\/r\d{10}\.json$/.test(rel), `classify left ${rel}`);
  const { ok, ...expect } = cl;
  return {
    expect,
    after: {
      seat: headSummary(seatHead),
      session: headSummary(sessionHead),
      published,
      publishedRecords: Object.fromEntries(published.map((rel) => [rel, JSON.parse(after[rel])])),
    },
  };
}

function fixture(s) {
  const writer = {
    host: s.writer?.host ?? writerHost,
    processes: s.writer?.processes ?? writerProcs,
    now: T_WRITE,
    ops: s.ops,
  };
  const classify = {
    seat: SEAT, session: SESSION,
    units: s.classify.units ?? {}, bootProof: s.classify.bootProof ?? null, adopt: s.classify.adopt ?? null,
    host: s.classify.host ?? { machineId: M1, bootId: B1 },
    processes: s.classify.processes,
    now: T_CLASSIFY,
  };

  const root = mkdtempSync(join(tmpdir(), "claimstore-gen-"));
  const fresh = mkdtempSync(join(tmpdir(), "claimstore-gen-"));
  try {
    const { results } = drive({ root, host: writer.host, processes: writer.processes, now: writer.now, ops: writer.ops });
    results.forEach((r, i) => {
      const crashed = i > 0 && writer.ops[i - 1].op === "stopAt";
      const refused = s.refused?.[i];
      const fine = crashed ? !r.ok && r.message === "crash" : refused ? !r.ok && r.code === refused : r.ok;
      check(fine && (r.interleaved ?? []).every((x) => x.ok), `${s.name}: writer op ${i} ${JSON.stringify(r)}`);
    });
    stableTemps(root);
    const files = walk(root);
    const got = classifyRoot(root, classify);

    for (const [k, v] of Object.entries(s.want)) check(isDeepStrictEqual(got.expect[k], v), `${s.name}: ${k} = ${JSON.stringify(got.expect[k])}, want ${JSON.stringify(v)}`);
    check(got.after.published.length === s.published, `${s.name}: published ${got.after.published.length}, want ${s.published}`);

    const head = {
      description: s.description,
      ...(s.quirk ? { quirk: s.quirk } : {}),
      writer,
      classify,
      expect: got.expect,
      after: got.after,
    };
    const text = formatTxtar(JSON.stringify(head, null, 2) + "\n", files);

    // Self-check: the fixture alone reproduces the answer.
    const parsed = parseTxtar(text);
    check(isDeepStrictEqual(parsed.files, files), `${s.name}: txtar round trip`);
    const meta = JSON.parse(parsed.comment);
    materialise(fresh, parsed.files);
    const again = classifyRoot(fresh, meta.classify);
    check(isDeepStrictEqual(again, { expect: meta.expect, after: meta.after }), `${s.name}: re-run differs:\n${JSON.stringify(again)}\n${JSON.stringify(meta)}`);
    return text;
  } finally {
    rmSync(root, { recursive: true, force: true });
    rmSync(fresh, { recursive: true, force: true });
  }
}

// ---------------------------------------------------------------- main

writeFileSync(join(testdata, "keyhash.json"), keyhashVectors());
const names = new Set();
for (const s of scenarios) {
  check(!names.has(s.name), `duplicate scenario ${s.name}`);
  names.add(s.name);
  writeFileSync(join(here, `${s.name}.txtar`), fixture(s));
}
// Drop fixtures of scenarios that no longer exist, so the directory is
// exactly what this script makes.
for (const name of readdirSync(here)) {
  if (name.endsWith(".txtar") && !names.has(name.slice(0, -".txtar".length))) rmSync(join(here, name));
}
console.log(`wrote testdata/keyhash.json and ${names.size} fixtures in testdata/reference`);
