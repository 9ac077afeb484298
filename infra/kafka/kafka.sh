#!/usr/bin/env bash
# Local single-node Apache Kafka (KRaft broker + controller on 127.0.0.1), no Docker.
#
#   infra/kafka/kafka.sh fetch    # collect the broker jars from Maven Central (cached)
#   infra/kafka/kafka.sh start    # fetch if needed, format once, start, wait until ready
#   infra/kafka/kafka.sh status   # prints stopped | starting | ready and the broker's address
#                                 # (exit 0 when ready, 1 otherwise)
#   infra/kafka/kafka.sh stop     # SIGTERM, then SIGKILL after a timeout
#
# Settings (environment):
#   DPROBE_KAFKA_PORT             client port              (default 9092)
#   DPROBE_KAFKA_CONTROLLER_PORT  controller port          (default 9093)
#   DPROBE_KAFKA_STATE_DIR        data, logs, pid, config  (default ~/.cache/dprobe/broker)
#   DPROBE_KAFKA_LIB_DIR          broker jars              (default ~/.cache/dprobe/kafka-lib)
#   DPROBE_KAFKA_HEAP             JVM heap                 (default 512m)
#   DPROBE_KAFKA_START_TIMEOUT_S  readiness wait           (default 120)
#   DPROBE_KAFKA_STOP_TIMEOUT_S   SIGTERM wait before SIGKILL, whole seconds (default 30)
#   DPROBE_KAFKA_SASL_USER        with DPROBE_KAFKA_SASL_PASSWORD: the client port speaks
#                                 SASL_PLAINTEXT with SCRAM-SHA-512 and this one user
#                                 (created when the data dir is first formatted)
#
# `dprobe broker start|stop|status` calls this script with the same settings.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
PORT="${DPROBE_KAFKA_PORT:-9092}"
CPORT="${DPROBE_KAFKA_CONTROLLER_PORT:-9093}"
STATE="${DPROBE_KAFKA_STATE_DIR:-${HOME}/.cache/dprobe/broker}"
LIB="${DPROBE_KAFKA_LIB_DIR:-${HOME}/.cache/dprobe/kafka-lib}"
HEAP="${DPROBE_KAFKA_HEAP:-512m}"
START_TIMEOUT="${DPROBE_KAFKA_START_TIMEOUT_S:-120}"
SASL_USER="${DPROBE_KAFKA_SASL_USER:-}"
SASL_PASSWORD="${DPROBE_KAFKA_SASL_PASSWORD:-}"
STOP_TIMEOUT="${DPROBE_KAFKA_STOP_TIMEOUT_S:-30}"
DEP_PLUGIN="org.apache.maven.plugins:maven-dependency-plugin:3.8.1:copy-dependencies"

PIDFILE="${STATE}/broker.pid"
LOGDIR="${STATE}/logs"
DATADIR="${STATE}/data"
CONF="${STATE}/server.properties"

die() { echo "dprobe broker: $*" >&2; exit 2; }

# whole seconds, read as decimal (bash arithmetic would read a leading 0 as octal)
[[ "${STOP_TIMEOUT}" =~ ^(0|[1-9][0-9]*)$ ]] \
  || die "DPROBE_KAFKA_STOP_TIMEOUT_S must be whole seconds, not '${STOP_TIMEOUT}'"

need_java() {
  command -v java >/dev/null 2>&1 \
    || die "Java 17 or newer is required but 'java' was not found: install the package openjdk-17-jre-headless"
  local v
  v="$(java -version 2>&1 | awk -F'"' '/version/ {print $2; exit}')"
  local major="${v%%.*}"
  [[ "${major}" =~ ^[0-9]+$ ]] && (( major >= 17 )) \
    || die "Java 17 or newer is required but found '${v}': install the package openjdk-17-jre-headless"
}

make_dirs() {
  # mkdir -p DIR...; on failure, one line naming WHAT (the setting) and the first reason.
  local what="$1" err
  shift
  err="$(mkdir -p "$@" 2>&1)" || die "cannot create ${what}: ${err%%$'\n'*}"
}

fetch() {
  if [[ -f "${LIB}/.complete" ]]; then return 0; fi
  command -v mvn >/dev/null 2>&1 \
    || die "Maven is required to fetch the Kafka broker jars but 'mvn' was not found: install the package maven"
  make_dirs "the jar cache ${LIB} (DPROBE_BROKER_LIB_DIR, [broker] lib_dir)" "${LIB}"
  echo "dprobe broker: fetching Apache Kafka jars from Maven Central into ${LIB}" >&2
  mvn -q -B -Dstyle.color=never -f "${HERE}/pom.xml" "${DEP_PLUGIN}" \
    -DincludeScope=runtime -DoutputDirectory="${LIB}" >&2 \
    || die "Maven could not fetch the broker jars (see the output above)"
  touch "${LIB}/.complete"
}

runs_this_broker() {
  # Whether process PID's command line is the broker of this state dir's config (matched
  # as text: the state dir may hold characters a pattern would read otherwise).
  tr '\0' ' ' < "/proc/$1/cmdline" 2>/dev/null | grep -qF -- "kafka.Kafka ${CONF}"
}

alive() {
  # The process runs: one that has exited but is not yet reaped by its parent (a zombie)
  # does not, though kill -0 still finds it.
  local stat
  kill -0 "$1" 2>/dev/null || return 1
  stat="$(cat "/proc/$1/stat" 2>/dev/null)" || return 1
  stat="${stat##*) }"
  [[ "${stat:0:1}" != Z ]]
}

broker_pid() {
  # Prints the pid of a live broker started from this state dir; removes a stale pid file.
  # Without a valid pid file, a live broker of this state dir's config is looked for (one
  # whose start was killed before it wrote the file), and its pid written.
  local pid
  if [[ -f "${PIDFILE}" ]]; then
    pid="$(cat "${PIDFILE}" 2>/dev/null || true)"
    if [[ "${pid}" =~ ^[0-9]+$ ]] && alive "${pid}" && runs_this_broker "${pid}"; then
      echo "${pid}"
      return 0
    fi
    rm -f "${PIDFILE}"
  fi
  local found
  # each argument of a command line is one NUL-ended line: the config's path is one
  for found in $(grep -zlxF -- "${CONF}" /proc/[0-9]*/cmdline 2>/dev/null); do
    pid="${found#/proc/}"
    pid="${pid%/cmdline}"
    if alive "${pid}" && runs_this_broker "${pid}"; then
      echo "${pid}" > "${PIDFILE}"
      echo "${pid}"
      return 0
    fi
  done
  return 1
}

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/${1:-${PORT}}") 2>/dev/null; }

log_says_started() { grep -q "Kafka Server started" "${LOGDIR}/server.log" 2>/dev/null; }

running_port() {
  # The client port of the live broker of this state dir (its config, rendered when it
  # started), which may differ from PORT when it was started with another; else PORT.
  local p
  p="$(sed -n 's|^listeners=[A-Z_]*://127\.0\.0\.1:\([0-9]*\),.*|\1|p' "${CONF}" 2>/dev/null | head -n 1)"
  echo "${p:-${PORT}}"
}

state() {
  if ! broker_pid >/dev/null; then echo stopped; return; fi
  if port_open "$(running_port)" && log_says_started; then echo ready; else echo starting; fi
}

# TEXT as the replacement of sed's s|...|...|: a backslash, '&' and '|' taken as they are
sed_escape() { printf '%s' "$1" | sed -e 's/[\\&|]/\\&/g'; }

# TEXT as a value of a Java properties file, which reads a backslash as an escape
props_escape() { printf '%s' "$1" | sed -e 's/\\/\\\\/g'; }

render_config() {
  make_dirs "the state dir ${STATE} (--state-dir, DPROBE_BROKER_STATE_DIR, [broker] state_dir)" \
    "${STATE}" "${LOGDIR}" "${DATADIR}"
  ( umask 077
    sed -e "s|@PORT@|${PORT}|g" -e "s|@CONTROLLER_PORT@|${CPORT}|g" \
      -e "s|@LOG_DIRS@|$(sed_escape "$(props_escape "${DATADIR}")")|g" "${HERE}/server.properties.in" > "${CONF}" )
  if [[ -n "${SASL_USER}" ]]; then
    [[ -n "${SASL_PASSWORD}" ]] || die "DPROBE_KAFKA_SASL_USER needs DPROBE_KAFKA_SASL_PASSWORD"
    sed -i -e "s|^listeners=PLAINTEXT://|listeners=SASL_PLAINTEXT://|" \
      -e "s|^advertised.listeners=PLAINTEXT://|advertised.listeners=SASL_PLAINTEXT://|" \
      -e "s|^inter.broker.listener.name=PLAINTEXT|inter.broker.listener.name=SASL_PLAINTEXT|" \
      -e "s|^listener.security.protocol.map=.*|listener.security.protocol.map=CONTROLLER:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT|" \
      "${CONF}"
    {
      echo "sasl.enabled.mechanisms=SCRAM-SHA-512"
      echo "sasl.mechanism.inter.broker.protocol=SCRAM-SHA-512"
      echo "listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username=\"${SASL_USER}\" password=\"${SASL_PASSWORD}\";"
    } >> "${CONF}"
  fi
}

format_once() {
  [[ -f "${DATADIR}/meta.properties" ]] && return 0
  local cid
  cid="$(head -c 16 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=\n')"
  while [[ "${cid}" == -* ]]; do
    cid="$(head -c 16 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=\n')"
  done
  local scram=()
  if [[ -n "${SASL_USER}" ]]; then
    scram=(--add-scram "SCRAM-SHA-512=[name=${SASL_USER},password=${SASL_PASSWORD}]")
  fi
  java -cp "${LIB}/*" kafka.tools.StorageTool format --cluster-id "${cid}" \
    --config "${CONF}" --ignore-formatted "${scram[@]}" >"${LOGDIR}/format.log" 2>&1 \
    || die "formatting ${DATADIR} failed: see ${LOGDIR}/format.log"
}

start() {
  need_java
  local s running
  s="$(state)"
  if [[ "${s}" != stopped ]]; then
    running="$(running_port)"
    [[ "${running}" == "${PORT}" ]] \
      || die "the broker of ${STATE} is already running on port ${running}: stop it first (dprobe broker stop) to start it on port ${PORT}, or use another --state-dir"
  fi
  if [[ "${s}" == ready ]]; then echo "ready 127.0.0.1:${PORT}"; return 0; fi
  if [[ "${s}" == stopped ]]; then
    if port_open "${PORT}"; then
      die "port ${PORT} on 127.0.0.1 is already in use by another process: choose another with --port (DPROBE_BROKER_PORT, [broker] port; DPROBE_KAFKA_PORT for this script alone)"
    fi
    if port_open "${CPORT}"; then
      die "controller port ${CPORT} on 127.0.0.1 is already in use by another process: choose another with --controller-port (DPROBE_BROKER_CONTROLLER_PORT, [broker] controller_port; DPROBE_KAFKA_CONTROLLER_PORT for this script alone)"
    fi
    fetch
    render_config
    format_once
    : > "${LOGDIR}/server.log"
    # setsid: the broker must outlive the shell (and the Python process) that started it.
    setsid java "-Xms${HEAP}" "-Xmx${HEAP}" -XX:+UseG1GC -XX:MaxGCPauseMillis=20 \
      -Djava.awt.headless=true "-Dkafka.logs.dir=${LOGDIR}" \
      "-Dlog4j2.configurationFile=${HERE}/log4j2.properties" \
      -cp "${LIB}/*" kafka.Kafka "${CONF}" \
      >"${LOGDIR}/stdout.log" 2>&1 < /dev/null &
    local pid=$!
    # Until the forked shell has exec'd java, its command line is not the broker's yet.
    local i
    for (( i = 0; i < 100; i++ )); do
      runs_this_broker "${pid}" && break
      kill -0 "${pid}" 2>/dev/null || break
      sleep 0.05
    done
    echo "${pid}" > "${PIDFILE}"
  fi
  local deadline=$(( SECONDS + START_TIMEOUT ))
  while (( SECONDS < deadline )); do
    s="$(state)"
    if [[ "${s}" == ready ]]; then echo "ready 127.0.0.1:${PORT}"; return 0; fi
    if [[ "${s}" == stopped ]]; then
      echo "dprobe broker: the broker exited during start; last log lines:" >&2
      tail -n 20 "${LOGDIR}/server.log" "${LOGDIR}/stdout.log" >&2 || true
      exit 1
    fi
    sleep 0.2
  done
  echo "dprobe broker: not ready after ${START_TIMEOUT}s (state: $(state)); see ${LOGDIR}/server.log" >&2
  exit 1
}

stop() {
  local pid
  if ! pid="$(broker_pid)"; then echo stopped; return 0; fi
  kill -TERM "${pid}" 2>/dev/null || true
  local deadline=$(( SECONDS + STOP_TIMEOUT ))
  while alive "${pid}" && (( SECONDS < deadline )); do sleep 0.2; done
  if alive "${pid}"; then
    echo "dprobe broker: no exit after ${STOP_TIMEOUT}s of SIGTERM, sending SIGKILL" >&2
    kill -KILL "${pid}" 2>/dev/null || true
    deadline=$(( SECONDS + 10 ))
    while alive "${pid}" && (( SECONDS < deadline )); do sleep 0.1; done
    if alive "${pid}"; then
      echo "dprobe broker: pid ${pid} still runs 10s after SIGKILL (stuck in the kernel?)" >&2
      exit 1
    fi
  fi
  rm -f "${PIDFILE}"
  echo stopped
}

case "${1:-}" in
  fetch) fetch ;;
  start) start ;;
  stop) stop ;;
  status)
    s="$(state)"
    if [[ "${s}" == stopped ]]; then echo "${s} 127.0.0.1:${PORT}"; else echo "${s} 127.0.0.1:$(running_port)"; fi
    [[ "${s}" == ready ]] ;;
  *) echo "usage: $0 fetch|start|stop|status" >&2; exit 2 ;;
esac
