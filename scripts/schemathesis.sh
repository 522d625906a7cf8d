#!/usr/bin/env bash
# Runs schemathesis (PyPI) against the cloud simulator, using the simulator's own OpenAPI
# document (docs/cloud-api.openapi.json, the same document it serves at /openapi.json).
#
#   scripts/schemathesis.sh                 # 100 examples per operation, every check
#   ST_MAX_EXAMPLES=20 scripts/schemathesis.sh
#
# Needs python3 (with venv) and cargo. The virtual environment is kept in
# target/schemathesis-venv; reports (JUnit XML, NDJSON) go to target/schemathesis-report.
# Exits non-zero when schemathesis reports a failure.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

version="${ST_VERSION:-4.32.5}"
venv="$root/target/schemathesis-venv"
report="$root/target/schemathesis-report"
port="${ST_PORT:-18089}"
max_examples="${ST_MAX_EXAMPLES:-100}"
seed="${ST_SEED:-1}"
# A key made for this run only; it is never a real account's key.
api_key="st-$(od -An -N8 -tx1 /dev/urandom | tr -d ' \n')"

if [ ! -x "$venv/bin/schemathesis" ] || ! "$venv/bin/schemathesis" --version | grep -q "$version"; then
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet "schemathesis==$version"
fi

cargo build --quiet --bin gpucloud-operator
log="$(mktemp)"
GPUCLOUD_SIM_API_KEYS="$api_key" GPUCLOUD_SIM_LISTEN="127.0.0.1:$port" \
    "$root/target/debug/gpucloud-operator" simulator >"$log" 2>&1 &
simulator=$!
trap 'kill "$simulator" 2>/dev/null || true; wait "$simulator" 2>/dev/null || true; rm -f "$log"' EXIT

for _ in $(seq 1 100); do
    if curl -sf "http://127.0.0.1:$port/openapi.json" >/dev/null 2>&1; then
        break
    fi
    if ! kill -0 "$simulator" 2>/dev/null; then
        echo "the simulator exited:" >&2
        cat "$log" >&2
        exit 1
    fi
    sleep 0.1
done

# The served document must be the checked-in one, or the run would test something else.
if ! diff <(curl -sf "http://127.0.0.1:$port/openapi.json" | python3 -m json.tool --sort-keys) \
          <(python3 -m json.tool --sort-keys docs/cloud-api.openapi.json) >/dev/null; then
    echo "the simulator serves an OpenAPI document other than docs/cloud-api.openapi.json" >&2
    exit 1
fi

mkdir -p "$report"
status=0
# Every check but positive_data_acceptance: the service refuses, with 400 and a message naming
# the field, values that fit the schema but name nothing it knows (a region code, a GPU type,
# an instance id) or break a rule between fields (a volume that would shrink, min_cost above
# max_cost). No schema states those; the simulator's own tests do.
"$venv/bin/schemathesis" run docs/cloud-api.openapi.json \
    --url "http://127.0.0.1:$port" \
    --header "X-API-Key: $api_key" \
    --checks all \
    --exclude-checks positive_data_acceptance \
    --max-examples "$max_examples" \
    --seed "$seed" \
    --workers "${ST_WORKERS:-1}" \
    --request-timeout 10 \
    --generation-database none \
    --report junit,ndjson \
    --report-dir "$report" \
    --no-color || status=$?

# Whatever happened, the simulator must still be up: nothing it was sent may bring it down.
if ! kill -0 "$simulator" 2>/dev/null; then
    echo "the simulator died during the run:" >&2
    tail -n 50 "$log" >&2
    exit 1
fi
exit "$status"
