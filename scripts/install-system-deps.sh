#!/usr/bin/env bash
# Installs what dprobe needs outside Python: a Java 17+ runtime and Maven (for the local
# Kafka broker). Uses apt-get when run as root on Debian/Ubuntu; otherwise prints the
# packages to install and exits 2. Does nothing when both are present.
set -euo pipefail

java_ok() {
  command -v java >/dev/null 2>&1 || return 1
  local v major
  v="$(java -version 2>&1 | awk -F'"' '/version/ {print $2; exit}')"
  major="${v%%.*}"
  [[ "${major}" =~ ^[0-9]+$ ]] && (( major >= 17 ))
}

missing=()
java_ok || missing+=(openjdk-17-jre-headless)
command -v mvn >/dev/null 2>&1 || missing+=(maven)
python3 -c 'import venv, ensurepip' 2>/dev/null || missing+=(python3-venv)
if (( ${#missing[@]} == 0 )); then exit 0; fi

if [[ "$(id -u)" == 0 ]] && command -v apt-get >/dev/null 2>&1; then
  echo "installing ${missing[*]} with apt-get" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
else
  echo "dprobe needs these packages: ${missing[*]} (e.g. sudo apt-get install ${missing[*]})" >&2
  exit 2
fi
