#!/usr/bin/env bash
# Screenshot a comparison's HTML report as a reader sees it at 1000 px: headless Chromium, no network, no profile.
# Not part of the test suite (it needs Chromium: `apt-get install -y chromium`).
#
#   scripts/screenshot_report.sh [REPORT.html] [OUT.png]
#
# Without REPORT.html it renders the report of the recorded attention fixtures (scripts/fixture_report.py) into
# $TMPDIR/reprobundle-report-fixture/ (report.md, report.html, report.txt, report.png). Check by eye: headlines
# first, the chart's axis titles, units, legend and intervals, nothing running off the right edge.
set -euo pipefail
cd "$(dirname "$0")/.."
report="${1:-}"
folder="${TMPDIR:-/tmp}/reprobundle-report-fixture"
out="${2:-$folder/report.png}"
if [ -z "$report" ]; then
  report="$(.venv/bin/python scripts/fixture_report.py "$folder")"
fi
browser="$(command -v chromium || command -v chromium-browser || command -v google-chrome || true)"
if [ -z "$browser" ]; then
  echo "no Chromium found: apt-get install -y chromium" >&2
  exit 1
fi
profile="$(mktemp -d)"
trap 'rm -rf "$profile"' EXIT
mkdir -p "$(dirname "$out")"
"$browser" --headless --no-sandbox --disable-gpu --no-first-run --disable-background-networking \
  --disable-component-update --disable-sync --user-data-dir="$profile" --hide-scrollbars \
  --screenshot="$(realpath -m "$out")" --window-size=1000,1400 "file://$(realpath "$report")" 2>/dev/null
echo "$out"
