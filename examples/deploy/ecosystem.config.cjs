// PM2 cluster mode: `pm2 start ecosystem.config.cjs`. Every instance is a candidate; one leads.
module.exports = {
  apps: [
    {
      name: 'nightly-billing',
      script: 'dist/worker.js',
      exec_mode: 'cluster',
      instances: 2,
      // each instance serves its probes on its own port: 9464, 9465, …
      env: { PROBES_PORT: 9464 },
      increment_var: 'PROBES_PORT',
      // PM2 sends SIGINT, then SIGKILL after kill_timeout (ms): above SHUTDOWN_TIMEOUT_MS (10 s)
      kill_timeout: 15_000,
    },
  ],
};
