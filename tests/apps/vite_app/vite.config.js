// The dev server as the end-to-end test runs it inside a sandbox: the port is the test's,
// and the dependency cache goes to /tmp (node_modules is the checkout's, read-only inside).
export default {
  cacheDir: "/tmp/vite-cache",
  clearScreen: false,
  server: { host: "127.0.0.1", port: Number(process.env.VITE_PORT), strictPort: true },
};
