// The SSRF guard's verdict on one resolved address (proxy/ssrf-rules.ts
// classifyAddress): strings only, nothing is resolved or connected to.
// `node dist/bench/micro/classify-address.js`.
import { classifyAddress } from '../../proxy/ssrf-rules.js';
import { measure, runWhenMain, type MicroCases } from './measure.js';

export const measureClassifyAddress: MicroCases = () => [
  // A public address passes every refused range of its family: the longest walk.
  measure('classifyAddress (public IPv4)', () => classifyAddress('93.184.216.34')),
  measure('classifyAddress (public IPv6)', () => classifyAddress('2606:2800:220:1:248:1893:25c8:1946')),
  measure('classifyAddress (private IPv4, 192.168.0.0/16: refused)', () => classifyAddress('192.168.1.20')),
];

runWhenMain(import.meta.url, measureClassifyAddress);
