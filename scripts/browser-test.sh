#!/usr/bin/env bash
# The browser player's tests in headless Chromium: Debian's `chromium` (installed
# here when missing) driven by playwright-core (pinned in scripts/browser/package-lock.json;
# no browser download). Starts `bsor-stream serve` on 127.0.0.1, publishes a synthetic
# replay live and checks the page: the live session ends with every frame and the final
# score, a stored replay plays from &t=, a hostile player name renders as text, a damaged
# stream shows its error, a local .bsor plays; maps (zips the tests make, their song encoded
# as Ogg Vorbis by Debian's oggenc, installed here when missing) drawn and their song in step,
# stored and live (joined late);
# with BSOR_CORPUS set (a folder of real .bsor files), the real replays by URL, live and joined
# late. Screenshots go to target/browser/ (and the map's to docs/figures/player-map.png).
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
[ -x /usr/bin/chromium ] || need+=(chromium)
command -v node >/dev/null || need+=(nodejs)
command -v npm >/dev/null || need+=(npm)
command -v oggenc >/dev/null || need+=(vorbis-tools)
if [ ${#need[@]} -gt 0 ]; then
    echo "browser-test: installing ${need[*]}"
    sudo=""
    [ "$(id -u)" = 0 ] || sudo="sudo"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${need[@]}" >/dev/null
fi
if [ ! -d scripts/browser/node_modules/playwright-core ]; then
    (cd scripts/browser && PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm ci --no-audit --no-fund --silent)
fi

cargo build --release --quiet -p bsor-stream-cli --bin bsor-stream
node scripts/browser/test.mjs "$(pwd)/target/release/bsor-stream"
