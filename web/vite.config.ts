import { defineConfig } from 'vite';

declare const process: { env: Record<string, string | undefined> };

// Output goes where the router embeds it from (router/src/dashboard); scripts/build_web.sh
// then writes the manifest. Every file but index.html carries a content hash in its name.
export default defineConfig({
  base: '/',
  esbuild: { jsx: 'automatic', jsxImportSource: 'preact' },
  // `npm run dev`: the dashboard with live reload, talking to a running Sextant
  // (SEXTANT_URL, default `sextant dev`'s) through this server, so cookies stay same-origin.
  server: {
    proxy: Object.fromEntries(
      ['/api', '/auth', '/projects', '/billing'].map((p) => [p, { target: process.env.SEXTANT_URL ?? 'http://127.0.0.1:8080', changeOrigin: true }]),
    ),
  },
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
