/**
 * `npm run check:package`: the packed package must stay at most 400 kB (source maps without
 * embedded sources, no test catalogue; the contributors' docs/testing.md and state-machine.md
 * and the bench's tables, docs/benchmarks.md, stay in the repository). Prints the packed and unpacked sizes and the
 * largest files; exits 1 above the limit. Run after `npm run build`.
 */
import { execFileSync } from 'node:child_process';

const LIMIT = 400 * 1000;
const [pack] = JSON.parse(
  execFileSync('npm', ['pack', '--dry-run', '--json', '--ignore-scripts'], { encoding: 'utf8' }),
);
const kB = (n) => `${(n / 1000).toFixed(1)} kB`;
console.log(
  `packed ${kB(pack.size)}, unpacked ${kB(pack.unpackedSize)}, ${pack.entryCount} files (limit ${kB(LIMIT)} packed)`,
);
for (const f of [...pack.files].sort((a, b) => b.size - a.size).slice(0, 5))
  console.log(`  ${kB(f.size)}  ${f.path}`);
const missing = ['dist/index.js', 'dist/index.cjs', 'dist/cli.js'].filter(
  (p) => !pack.files.some((f) => f.path === p),
);
if (missing.length) {
  console.error(`pack-size: ${missing.join(', ')} missing from the package: run npm run build first`);
  process.exit(1);
}
if (pack.files.some((f) => f.path === 'docs/testing.md')) {
  console.error('pack-size: docs/testing.md (the test catalogue) must not be published');
  process.exit(1);
}
if (pack.size > LIMIT) {
  console.error(`pack-size: the package is ${kB(pack.size)} packed, above the ${kB(LIMIT)} limit`);
  process.exit(1);
}
