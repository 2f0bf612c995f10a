// node holding a Map of N entries, each an object with a string and an array, every 16th with
// a Buffer of its own too (heaptui's real-program test: tests/real_programs.rs). V8 keeps its
// objects in pages of its own, mmaps marked MADV_DONTFORK; V8's malloc blocks are reachable
// only through pointers kept there. At its peak it prints "entries: N" and reads one line from
// stdin, where the driver takes its snapshot; then a pass over the values, and it ends when
// stdin does.
const n = Number(process.argv[2]);
const m = new Map();
for (let i = 1; i <= n; i++) {
  const entry = { i, name: `value${i}`, list: [i, i + 1] };
  if (i % 16 === 0) {
    entry.buffer = Buffer.allocUnsafeSlow(64 + (i % 64)).fill(i & 0xff);
  }
  m.set(`key${i}`, entry);
}
process.stdout.write(`entries: ${m.size}\n`);
let seen = false;
process.stdin.on("data", () => {
  if (seen) return;
  seen = true;
  let sum = 0;
  let bytes = 0;
  let names = 0;
  for (const v of m.values()) {
    sum += v.i;
    bytes += v.buffer ? v.buffer.reduce((a, b) => a + b, 0) : 0;
    names += v.name.length;
  }
  process.stdout.write(`sum: ${sum} buffer byte sum: ${bytes} name bytes: ${names}\n`);
});
process.stdin.resume();
