// Writes TypeScript declarations of the WIT world for the guest side:
//   node tools/types.mjs WIT_DIR OUT_DIR
// `jco guest-types` does the same, but jco 1.35 with preview2-shim 0.26.1
// gives its WebAssembly type generator no preopened directory (the shim's
// default became "none"), so it cannot read the WIT. This script preopens
// "/" for that one call.
import { createRequire } from 'node:module';
import { dirname, join, resolve } from 'node:path';
import { mkdir, writeFile } from 'node:fs/promises';
import { pathToFileURL } from 'node:url';

const [witDir, outDir] = process.argv.slice(2);
if (!witDir || !outDir) {
  console.error('usage: node tools/types.mjs WIT_DIR OUT_DIR');
  process.exit(2);
}
const require = createRequire(import.meta.url);
const transpileDir = dirname(dirname(require.resolve('@bytecodealliance/jco-transpile')));
const shim = join(transpileDir, 'node_modules/@bytecodealliance/preview2-shim/dist/nodejs/filesystem.js');
const fs = await import(pathToFileURL(shim).href).catch(() => import('@bytecodealliance/preview2-shim/filesystem'));
fs._setPreopens({ '/': '/' });
const { generateGuestTypes } = await import('@bytecodealliance/jco-transpile');
const files = await generateGuestTypes(resolve(witDir), { worldName: 'operator', outDir: resolve(outDir) + '/' });
for (const [path, bytes] of Object.entries(files)) {
  await mkdir(dirname(path), { recursive: true });
  await writeFile(path, bytes);
}
console.error(`wrote ${Object.keys(files).length} declaration file(s) to ${outDir}`);
