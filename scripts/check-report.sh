#!/usr/bin/env bash
# Checks that a `stoke train --report` page renders: loads it in headless Chromium, offline, and
# checks that its script drew every plot without an error (it marks <body data-rendered="ok">),
# and that the compute busy it draws agrees with its summary card and its epoch table.
# With --screenshot, also writes a PNG of the whole page (next to the report, or at PNG).
#
#   scripts/check-report.sh run.html [--screenshot[=PNG]]
#
# Uses $CHROMIUM, else chromium / chromium-browser / google-chrome on the PATH; installs Debian's
# chromium with apt-get when none is found and this runs as root.
set -euo pipefail

usage() {
  echo "usage: $0 REPORT.html [--screenshot[=PNG]]" >&2
  exit 2
}

report=""
screenshot=""
for arg in "$@"; do
  case "${arg}" in
    --screenshot) screenshot="auto" ;;
    --screenshot=*) screenshot="${arg#--screenshot=}" ;;
    -h | --help) usage ;;
    -*) echo "check-report: unknown option ${arg}" >&2; usage ;;
    *) [[ -z "${report}" ]] || usage; report="${arg}" ;;
  esac
done
[[ -n "${report}" ]] || usage
if [[ ! -f "${report}" ]]; then
  echo "check-report: no report at ${report}" >&2
  exit 1
fi
[[ "${screenshot}" == "auto" ]] && screenshot="${report%.html}.png"

find_chromium() {
  if [[ -n "${CHROMIUM:-}" ]]; then
    echo "${CHROMIUM}"
    return
  fi
  local name
  for name in chromium chromium-browser google-chrome google-chrome-stable; do
    if command -v "${name}" >/dev/null; then
      command -v "${name}"
      return
    fi
  done
}

chromium="$(find_chromium)"
if [[ -z "${chromium}" ]]; then
  if [[ "$(id -u)" == 0 ]] && command -v apt-get >/dev/null; then
    echo "check-report: installing chromium (apt-get)" >&2
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
    chromium="$(find_chromium)"
  fi
  if [[ -z "${chromium}" ]]; then
    echo "check-report: no Chromium found; install it (Debian/Ubuntu: sudo apt-get install chromium)" \
      "or set CHROMIUM to a Chromium or Chrome binary" >&2
    exit 1
  fi
fi

if ! command -v "${chromium}" >/dev/null; then
  echo "check-report: ${chromium} is not an executable (CHROMIUM?)" >&2
  exit 1
fi

work="$(mktemp -d)"
trap 'rm -rf "${work}"' EXIT

# Chromium's log, less the D-Bus complaints every headless run makes in a container.
chromium_said() {
  grep -v -e 'dbus' -e '^$' "$1" | tail -n 20 >&2 || true
}

# A file:// URL of the report's absolute path, with the characters a URL reserves escaped.
path="$(cd "$(dirname "${report}")" && pwd)/$(basename "${report}")"
path="${path//%/%25}"
path="${path// /%20}"
path="${path//#/%23}"
path="${path//\?/%3F}"
url="file://${path}"

# A fresh profile each time; no sandbox, which fails as root and in containers. The virtual time
# budget lets the page's script run to the end before the DOM is taken.
browse() {
  timeout 120 "${chromium}" --headless --no-sandbox --disable-gpu --disable-dev-shm-usage --no-first-run \
    --no-default-browser-check --disable-extensions --user-data-dir="${work}/profile" --hide-scrollbars \
    --virtual-time-budget=5000 "$@" "${url}"
}

if ! browse --window-size=1280,900 --dump-dom >"${work}/dom.html" 2>"${work}/chromium.log"; then
  echo "check-report: ${chromium} failed on ${report}:" >&2
  chromium_said "${work}/chromium.log"
  exit 1
fi
dom="${work}/dom.html"

if grep -q 'data-rendered="error"' "${dom}"; then
  echo "check-report: ${report}: the page's script failed:" >&2
  tr '\n' ' ' <"${dom}" | sed -n 's/.*<div id="report-error"[^>]*>\([^<]*\)<.*/  \1/p' >&2
  echo >&2
  exit 1
fi
if ! grep -q 'data-rendered="ok"' "${dom}"; then
  echo "check-report: ${report}: the page's script never finished (no data-rendered=\"ok\" on <body>);" \
    "is this a stoke report?" >&2
  chromium_said "${work}/chromium.log"
  exit 1
fi

missing=()
for plot in plot-throughput plot-stage-time plot-stage-bars plot-loss plot-accuracy; do
  grep -q "id=\"${plot}\" class=\"plot\"[^>]*><svg" "${dom}" || missing+=("${plot}")
done
if ((${#missing[@]} > 0)); then
  echo "check-report: ${report}: rendered, but without the plot(s) ${missing[*]}" >&2
  exit 1
fi

# The compute busy while training, three ways that must agree: the summary's card, the mean of
# the line the throughput plot drew, and the epoch table's (the plot marks the last two on itself).
card="$(tr '\n' ' ' <"${dom}" |
  sed -n 's/.*<div class="k">compute busy, training<\/div><div class="v">\([0-9.]*\)%<\/div>.*/\1/p')"
drawn="$(sed -n 's/.*data-compute-busy-drawn="\([0-9.]*\)".*/\1/p' "${dom}" | head -n 1)"
epochs="$(sed -n 's/.*data-compute-busy-epochs="\([0-9.]*\)".*/\1/p' "${dom}" | head -n 1)"
busy_text=""
if [[ -n "${card}" && -z "${drawn}" ]]; then
  echo "check-report: ${report}: the summary gives a compute busy (${card}%) but the plot drew none" >&2
  exit 1
fi
if [[ -n "${card}" ]]; then
  # Within 5 points: the card and the plot weigh the same samples, the table whole passes.
  if ! awk -v card="${card}" -v drawn="${drawn}" -v epochs="${epochs}" 'BEGIN {
      bad = (card - 100 * drawn > 5 || 100 * drawn - card > 5)
      if (epochs != "") bad = bad || (card - 100 * epochs > 5 || 100 * epochs - card > 5)
      exit bad }'; then
    echo "check-report: ${report}: the compute busy disagrees: the summary says ${card}%, the plot draws" \
      "$(awk -v d="${drawn}" 'BEGIN { printf "%.1f", 100 * d }')% on average" \
      "${epochs:+and the epoch table has $(awk -v e="${epochs}" 'BEGIN { printf "%.1f", 100 * e }')%}" >&2
    exit 1
  fi
  busy_text=", compute busy ${card}% in the summary, plot and epoch table alike"
fi

markers="$( (grep -o 'class="marker"' "${dom}" || true) | wc -l)"
echo "check-report: ${report} renders: 5 plots drawn, ${markers} scheduler move(s) on the timeline${busy_text}"

if [[ -n "${screenshot}" ]]; then
  # The whole page: as tall as the page said it was at this width.
  height="$(sed -n 's/.*data-height="\([0-9]*\)".*/\1/p' "${dom}" | head -n 1)"
  height="${height:-2400}"
  if ((height < 900)); then height=900; fi
  if ((height > 16000)); then height=16000; fi
  rm -rf "${work}/profile"
  if ! browse --window-size="1280,${height}" --screenshot="${work}/page.png" >/dev/null 2>"${work}/shot.log" ||
    [[ ! -s "${work}/page.png" ]]; then
    echo "check-report: the screenshot failed:" >&2
    chromium_said "${work}/shot.log"
    exit 1
  fi
  mv "${work}/page.png" "${screenshot}"
  echo "check-report: screenshot ${screenshot} (1280x${height})"
fi
