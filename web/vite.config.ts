import { defineConfig } from 'vite';

// Output goes where the router embeds it from (router/src/dashboard); scripts/build_web.sh
// then writes the manifest. Every file but index.html carries a content hash in its name.
export default defineConfig({
  base: '/',
  esbuild: { jsx: 'automatic', jsxImportSource: 'preact' },
  build: {
    outDir: '../router/assets/dashboard',
    emptyOutDir: true,
    assetsDir: 'assets',
    sourcemap: false,
    target: 'es2020',
    cssCodeSplit: true,
    assetsInlineLimit: 0,
    chunkSizeWarningLimit: 800,
  },
});
