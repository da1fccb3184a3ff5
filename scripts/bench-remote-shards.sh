#!/usr/bin/env bash
# Remote tar shards against the same shards on local disk: `stoke bench pipeline` on a photo corpus
# packed into tar shards, read (1) from the local folder, (2) over loopback HTTP with a range
# request per member (no cache), (3) over loopback HTTP through a shard cache folder (filled by a
# first, untimed run: the steady state; the cold run's rate is printed too), and in an order by
# shards (the tar format's window=WINDOW, default 2) (4) from the local folder and (5) over
# loopback HTTP without a cache, whole shards streamed into memory ahead of the reads. Interleaved, ROUNDS
# times (default 5); prints each run, the medians and remote/local. The machine may be shared and
# noisy: interleaving spreads its moods over all sides. Each run's CPU time per image (stoke's user +
# system time, and the server's) says where a difference goes.
#
#   scripts/bench-remote-shards.sh STOKE CORPUS [WORK_FOLDER]
#
# STOKE: the stoke binary; CORPUS: an image folder of photo-sized JPEGs
# (scripts/make-photo-corpus.py makes one); WORK_FOLDER (default /tmp/stoke-remote-bench): the
# shards and the cache. The server is lighttpd when it is installed (Debian: lighttpd; as root this
# script installs it), else tests/remote/range_server.py (Python: slower per request, so the
# range-request side then measures the server as much as stoke). SECONDS_PER_RUN (default 15),
# THREADS (default: the cores), SHARD_BYTES (default 32M), WINDOW (2) and STREAM_MEMORY (the
# streamed side's memory budget, default 2G: a dataset that fits stays in memory after the first
# epoch; give less than the data, e.g. (WINDOW + 2) x SHARD_BYTES, to measure shards downloaded
# again every epoch) change the setup.
set -euo pipefail

if [[ $# -lt 2 || $# -gt 3 ]]; then
  echo "usage: scripts/bench-remote-shards.sh STOKE CORPUS [WORK_FOLDER]" >&2
  exit 2
fi
stoke=$(realpath "$1")
corpus=$2
work=${3:-/tmp/stoke-remote-bench}
here=$(cd "$(dirname "$0")" && pwd)
if [[ ! -x "$stoke" ]]; then
  echo "bench-remote-shards.sh: $1 is not an executable" >&2
  exit 2
fi
if [[ ! -d "$corpus" ]]; then
  echo "bench-remote-shards.sh: $corpus is not a folder (make one with scripts/make-photo-corpus.py)" >&2
  exit 2
fi
if ! command -v lighttpd > /dev/null && [[ $(id -u) -eq 0 ]] && command -v apt-get > /dev/null; then
  (apt-get update -qq && apt-get install -y -qq lighttpd > /dev/null) || echo "bench-remote-shards.sh: lighttpd not installed" >&2
fi

mkdir -p "$work"
shards="$work/shards"
if ! ls "$shards"/train-*.tar > /dev/null 2>&1; then
  echo "packing $corpus into tar shards of ${SHARD_BYTES:-32M} in $shards ..."
  "$stoke" pack --data "$corpus" --out "$shards/train-%06d.tar" --format tar --shard-bytes "${SHARD_BYTES:-32M}" > /dev/null
fi
count=$(ls "$shards"/train-*.tar | wc -l)
last=$(printf '%06d' $((count - 1)))

# The server, on a free port of the loopback interface.
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
if command -v lighttpd > /dev/null; then
  server=lighttpd
  cat > "$work/lighttpd.conf" << EOF
server.document-root = "$shards"
server.bind = "127.0.0.1"
server.port = $port
server.max-keep-alive-requests = 100000
server.max-keep-alive-idle = 60
server.errorlog = "$work/lighttpd-error.log"
EOF
  lighttpd -D -f "$work/lighttpd.conf" &
  server_pid=$!
  base="http://127.0.0.1:$port"
else
  server="range_server.py (Python)"
  coproc SERVER { exec python3 "$here/../tests/remote/range_server.py" "$shards"; }
  read -r port <&"${SERVER[0]}"
  server_pid=$SERVER_PID
  base="http://127.0.0.1:$port/files"
fi
trap 'kill $server_pid 2> /dev/null || true' EXIT
for _ in $(seq 50); do  # until it answers
  python3 -c "import urllib.request as u; u.urlopen(u.Request('$base/train-000000.tar', method='HEAD'))" 2> /dev/null &&
    break
  sleep 0.1
done

echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
echo "stoke: $stoke ($(git -C "$here" rev-parse --short HEAD 2> /dev/null || echo '?'))"
echo "data: $count shards of $corpus ($(du -sh "$shards" | cut -f1)); server: $server on $base"

python3 - "$stoke" "$shards" "$base/train-{000000..$last}.tar" "$work/cache" "$server_pid" << 'EOF'
import json, os, resource, shutil, statistics, subprocess, sys

stoke, local, remote, cache, server_pid = sys.argv[1:6]
rounds = int(os.environ.get("ROUNDS", "5"))
seconds = os.environ.get("SECONDS_PER_RUN", "15")
threads = os.environ.get("THREADS", str(os.cpu_count()))
cached = f"tar cache={cache} cache_bytes=64G"
window = f"tar window={os.environ.get('WINDOW', '2')} memory={os.environ.get('STREAM_MEMORY', '2G')}"
sides = {"local": [local], "http": [remote, "--format", "tar"], "http+cache": [remote, "--format", cached],
         "local+window": [local, "--format", window], "http+window": [remote, "--format", window]}

def server_cpu():
    fields = open(f"/proc/{server_pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime

def run(data, length=("--seconds", seconds)):
    command = [stoke, "bench", "pipeline", "--data", *data, "--threads", threads, *length, "--json"]
    before, server_before = resource.getrusage(resource.RUSAGE_CHILDREN), server_cpu()
    out = subprocess.run(command, check=True, capture_output=True, text=True).stdout
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    result = json.loads(out.strip().splitlines()[-1])
    images = max(1, result["images"])
    result["cpu_ms"] = 1000 * (after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime) / images
    result["server_ms"] = 1000 * (server_cpu() - server_before) / images
    return result

def show(result):
    n = result.get("network") or {}
    wait = f", waited {n['wait_s']} s on the network" if n else ""
    return (f"{result['images_per_sec']:7.1f} images/s, CPU ms/image: stoke {result['cpu_ms']:.3f} server "
            f"{result['server_ms']:.3f} (limited by {result['bottleneck']}{wait})")

shutil.rmtree(cache, ignore_errors=True)
cold = run(sides["http+cache"], ("--epochs", "1"))  # fills the cache
print(f"cold cache, first run (downloads every shard): {show(cold)}", flush=True)
runs = {side: [] for side in sides}
for r in range(1, rounds + 1):
    for side, data in sides.items():
        result = run(data)
        runs[side].append(result)
        print(f"round {r} of {rounds}: {side:10} {show(result)}", flush=True)

median = {}
for side, results in runs.items():
    rates = [x["images_per_sec"] for x in results]
    median[side] = statistics.median(rates)
    cpu = statistics.median(x["cpu_ms"] + x["server_ms"] for x in results)
    print(f"{side:10} median {median[side]:.1f} images/s ({min(rates):.1f}-{max(rates):.1f}), "
          f"CPU ms/image (stoke + server) {cpu:.3f}")
for side in ("http", "http+cache"):
    print(f"{side} / local: {median[side] / median['local']:.3f}")
print(f"http+window / local+window (the same order by shards, streamed without a cache): "
      f"{median['http+window'] / median['local+window']:.3f}")
EOF
