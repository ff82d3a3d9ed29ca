#!/usr/bin/env bash
# The README's first command. At this stage of the project: installs what is missing, builds, mints a fresh
# Apple-shaped test PKI in memory, signs a few realistic notifications, and shows `pipelinectl verify`
# accepting them and refusing tampered and foreign copies with reasons.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install.sh
echo "== build"
swift build 2>&1 | tail -1

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
.build/debug/demo-notifications "$work/test-root.pem" 4 >"$work/bodies.jsonl"
echo "== pipelinectl verify --root <fresh test root> --bundle-id com.example.pipeline.app --app-apple-id 1234567890 --environment Production"
set +e
.build/debug/pipelinectl verify --root "$work/test-root.pem" --bundle-id com.example.pipeline.app \
    --app-apple-id 1234567890 --environment Production <"$work/bodies.jsonl" >"$work/verdicts.jsonl"
status=$?
set -e
python3 - "$work/verdicts.jsonl" <<'PY'
import json, sys
for number, line in enumerate(open(sys.argv[1]), 1):
    verdict = json.loads(line)
    if verdict["valid"]:
        payload, transaction = verdict["payload"], verdict["transactionInfo"] or {}
        kind = payload["notificationType"] + ("/" + payload["subtype"] if "subtype" in payload else "")
        print(f"  {number}. VALID    {kind:<42} originalTransactionId={transaction.get('originalTransactionId')} product={transaction.get('productId')}")
    else:
        print(f"  {number}. REFUSED  {verdict['error']:<42} {verdict['reason'][:90]}")
PY
echo "pipelinectl exit status: $status (1 = at least one input was refused, as expected here)"
