// `npm run start:admin`: the split-mode admin process.
process.stderr.write(
  'tool-call-guard: split mode (start:proxy / start:admin) is not available yet; run `npm start` for the all-in-one service.\n',
);
process.exit(2);
