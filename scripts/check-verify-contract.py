#!/usr/bin/env python3
"""Drives the real `pipelinectl verify` binary over ../shared/vectors the way an outside checker would.

Generated vectors: one stdin line per vector (its httpBody, or {"signedPayload": ...}), one run per receiver
configuration, with the test root; accepts must decode exactly as the vector says, rejects must be rejected.
Real Apple payloads: bare JWS lines with the embedded Apple root. Prints 'N passed, N failed'.
"""
import collections, glob, json, os, subprocess, sys

binary = sys.argv[1]
here = os.path.dirname(os.path.abspath(__file__))
shared = os.environ.get("PIPELINE_SHARED_DIR", os.path.join(here, "..", "..", "shared"))
vectors = os.path.join(shared, "vectors")
if not os.path.isdir(vectors):
    print(f"shared vectors not found at {vectors}")
    sys.exit(1 if os.environ.get("CI") == "true" else 0)

passed = failed = 0
def record(ok, label, detail=""):
    global passed, failed
    if ok:
        passed += 1
    else:
        failed += 1
        print(f"FAIL {label} {detail}")

def verify(lines, args):
    run = subprocess.run([binary, "verify", *args], input="\n".join(lines) + "\n", capture_output=True, text=True)
    results = [json.loads(line) for line in run.stdout.splitlines()]
    if len(results) != len(lines):
        print(f"expected {len(lines)} verdicts, got {len(results)}: {run.stderr[:500]}")
        sys.exit(1)
    all_valid = all(r["valid"] for r in results)
    if run.returncode != (0 if all_valid else 1):
        print(f"exit status {run.returncode} does not match the verdicts (all valid: {all_valid})")
        sys.exit(1)
    return results

generated = os.path.join(vectors, "generated")
groups = collections.defaultdict(list)
for path in sorted(glob.glob(os.path.join(generated, "vectors", "*.json"))):
    vector = json.load(open(path))
    line = vector["httpBody"] if "httpBody" in vector else json.dumps({"signedPayload": vector["signedPayload"]})
    config = vector["verifier"]
    groups[(config["environment"], config["bundleId"], config["appAppleId"])].append((os.path.basename(path), vector, line))
for (environment, bundle_id, app_apple_id), items in groups.items():
    args = ["--root", os.path.join(generated, "test-root-ca.pem"), "--bundle-id", bundle_id,
            "--app-apple-id", str(app_apple_id), "--environment", environment]
    for (name, vector, _), result in zip(items, verify([line for _, _, line in items], args)):
        ok = result["valid"] == (vector["expect"] == "accept")
        if ok and result["valid"]:
            ok = all(result[k] == vector["decoded"][k] for k in ("payload", "transactionInfo", "renewalInfo", "appTransactionInfo"))
        record(ok, name, f"expected {vector['expect']}, got {result.get('error', 'valid')}: {result.get('reason', '')[:160]}")

kinds = {"notification": "notification", "transaction": "transaction", "renewalInfo": "renewal"}
for path in sorted(glob.glob(os.path.join(vectors, "apple-real", "*.json"))):
    vector = json.load(open(path))
    jws = vector.get("signedPayload") or vector.get("signedTransaction") or vector.get("signedRenewalInfo")
    args = ["--environment", vector["environment"]]
    if vector.get("bundleId"):
        args += ["--bundle-id", vector["bundleId"]]
    if vector.get("appAppleId"):
        args += ["--app-apple-id", str(vector["appAppleId"])]
    [result] = verify([jws], args)
    ok = result["valid"] and result["kind"] == kinds[vector["kind"]] and result["payload"] == vector["decoded"]
    record(ok, os.path.basename(path), f"{result.get('error')}: {result.get('reason', '')[:160]}")

print(f"{passed} passed, {failed} failed")
sys.exit(1 if failed else 0)
