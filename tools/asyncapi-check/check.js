#!/usr/bin/env node
// Parse an AsyncAPI document with the official parser (@asyncapi/parser, pinned in
// package.json/package-lock.json) and print every diagnostic as one JSON object per line:
//   {"severity": "error"|"warning"|"information"|"hint", "code": ..., "path": "a.b.c", "message": ...}
// then a summary line {"summary": {"error": n, "warning": n, ...}, "parsed": true|false}.
// Exit 0 when the document parsed with no error, 1 otherwise, 2 on a usage problem.
// tests/contract/test_asyncapi_parser.py runs it; the JSON lines let the test name each finding.
'use strict';

const path = require('path');
const { Parser, fromFile, DiagnosticSeverity } = require('@asyncapi/parser');

const SEVERITY = {
  [DiagnosticSeverity.Error]: 'error',
  [DiagnosticSeverity.Warning]: 'warning',
  [DiagnosticSeverity.Information]: 'information',
  [DiagnosticSeverity.Hint]: 'hint',
};

async function main(file) {
  const parser = new Parser();
  const { document, diagnostics } = await fromFile(parser, path.resolve(file)).parse();
  const counts = { error: 0, warning: 0, information: 0, hint: 0 };
  for (const d of diagnostics) {
    const severity = SEVERITY[d.severity] || String(d.severity);
    counts[severity] = (counts[severity] || 0) + 1;
    process.stdout.write(JSON.stringify({
      severity, code: d.code, path: (d.path || []).join('.'), message: d.message,
    }) + '\n');
  }
  process.stdout.write(JSON.stringify({ summary: counts, parsed: document !== undefined }) + '\n');
  return document !== undefined && counts.error === 0 ? 0 : 1;
}

if (process.argv.length !== 3) {
  process.stderr.write('usage: node check.js ASYNCAPI_FILE\n');
  process.exit(2);
}
main(process.argv[2]).then(
  (code) => process.exit(code),
  (err) => { process.stderr.write(`${err && err.stack ? err.stack : err}\n`); process.exit(2); },
);
