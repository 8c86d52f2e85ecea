#!/usr/bin/env bash
# TLS for tas-extender: its serving certificate (the admission webhook's port and the extender verbs' port) and
# kube-scheduler's client certificate, which the verbs port requires (the extender trusts the CA for it).
#
# Creates a private CA (once) and, signed by it, a certificate for the Service DNS names <service>.<namespace>.svc
# (and the shorter and longer forms) and a client certificate (CN tas-scheduler, client auth only) for
# kube-scheduler, in --out (ca.crt, ca.key, tls.crt, tls.key, scheduler-client.crt, scheduler-client.key). Prints
# the webhook caBundle (base64 of the trusted CAs) on stdout; every other message goes to stderr, so
# `CA_BUNDLE=$(scripts/gen-webhook-cert.sh)` works.
#
# Run again to renew: the leaf certificates are renewed under the existing CA of --out (nothing else changes
# trust). --new-ca replaces the CA: the old one (ca-previous.crt) stays trusted next to the new one (ca-bundle.crt
# holds both) until the next renewal, which drops it.
#
# With --apply it also, through kubectl:
#   - creates the namespace if it is missing,
#   - writes the Secret <secret> (type kubernetes.io/tls: tls.crt, tls.key, ca.crt = the trusted CAs) the
#     Deployments mount, and the Secret <client-secret> (kube-scheduler's client certificate, same layout),
#   - patches the trusted CAs into every webhook of the MutatingWebhookConfiguration <webhook>, if it exists yet,
#   - rolls the Deployments tas-extender, then tas-scheduler, if they exist, one after the other
#     (`rollout restart`, then `rollout status` until it is done; never both at once) so they load the files.
#   With --new-ca it does this twice: first only trust (both CAs, the old certificates kept), then the new
#   certificates, so that at no time does one side present a certificate the other does not trust.
set -euo pipefail

NAMESPACE=tas-system
SERVICE=tas-extender
SECRET=tas-extender-tls
CLIENT_SECRET=tas-scheduler-client-tls
WEBHOOK=tas-extender
OUT=./tls
DAYS=365
CA_DAYS=3650
APPLY=0
NEW_CA=0
TIMEOUT=5m

usage() {
  cat >&2 <<EOF
usage: $0 [--namespace NS] [--service NAME] [--secret NAME] [--client-secret NAME] [--webhook NAME] [--out DIR]
          [--days N] [--ca-days N] [--new-ca] [--apply] [--timeout DURATION]

  --namespace NS   namespace of the Service and the Secret            (default: $NAMESPACE)
  --service NAME   Service the API server and kube-scheduler dial     (default: $SERVICE)
  --secret NAME    Secret the Deployments mount                        (default: $SECRET)
  --client-secret NAME  kube-scheduler's client certificate Secret    (default: $CLIENT_SECRET)
  --webhook NAME   MutatingWebhookConfiguration to patch               (default: $WEBHOOK)
  --out DIR        where ca.crt, ca.key, tls.crt, tls.key are written  (default: $OUT)
  --days N         validity of the certificates                        (default: $DAYS)
  --ca-days N      validity of a new CA                                (default: $CA_DAYS)
  --new-ca         replace the CA in --out (the old one stays trusted until the next renewal)
  --apply          write the Secrets and the caBundle, roll the Deployments, with kubectl
  --timeout DURATION  how long each rollout may take, e.g. 90s, 5m    (default: $TIMEOUT)
EOF
}

need_value() {
  if [ $# -lt 2 ] || [ -z "$2" ]; then
    echo "error: $1 needs a value" >&2
    usage
    exit 2
  fi
}

while [ $# -gt 0 ]; do
  case "$1" in
    -n|--namespace) need_value "$@"; NAMESPACE=$2; shift 2 ;;
    -s|--service) need_value "$@"; SERVICE=$2; shift 2 ;;
    --secret) need_value "$@"; SECRET=$2; shift 2 ;;
    --client-secret) need_value "$@"; CLIENT_SECRET=$2; shift 2 ;;
    --webhook) need_value "$@"; WEBHOOK=$2; shift 2 ;;
    -o|--out) need_value "$@"; OUT=$2; shift 2 ;;
    --days) need_value "$@"; DAYS=$2; shift 2 ;;
    --ca-days) need_value "$@"; CA_DAYS=$2; shift 2 ;;
    --apply) APPLY=1; shift ;;
    --new-ca) NEW_CA=1; shift ;;
    --timeout) need_value "$@"; TIMEOUT=$2; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "error: unknown argument '$1'" >&2; usage; exit 2 ;;
  esac
done

case "$DAYS" in
  ''|*[!0-9]*|0) echo "error: --days must be a positive integer, got '$DAYS'" >&2; exit 2 ;;
esac
case "$CA_DAYS" in
  ''|*[!0-9]*|0) echo "error: --ca-days must be a positive integer, got '$CA_DAYS'" >&2; exit 2 ;;
esac
case "$TIMEOUT" in
  *[!0-9smh]*|''|[smh]*|*[0-9]) echo "error: --timeout must be a duration like 90s, 5m or 1h, got '$TIMEOUT'" >&2; exit 2 ;;
esac
command -v openssl >/dev/null || { echo "error: openssl is required" >&2; exit 1; }

HOST="$SERVICE.$NAMESPACE.svc"
mkdir -p "$OUT"
umask 077
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

make_ca() {
  # ECDSA P-256, allowed to sign certificates only.
  openssl req -x509 -new -nodes -days "$CA_DAYS" \
    -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 \
    -keyout "$OUT/ca.key" -out "$OUT/ca.crt" \
    -subj "/CN=$SERVICE-ca-$(date -u +%Y%m%d%H%M%S)" \
    -addext "basicConstraints=critical,CA:TRUE" \
    -addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null
}

# What the cluster trusts now, to tell a first install from a renewal that lost its CA.
cluster_trusts_a_ca() {
  [ "$APPLY" = 1 ] && command -v kubectl >/dev/null &&
    [ -n "$(kubectl -n "$NAMESPACE" get secret "$SECRET" -o jsonpath='{.data.ca\.crt}' 2>/dev/null)" ]
}

# The certificates being replaced, kept for the first step of a CA change.
OLD=$WORK/old
mkdir -p "$OLD"
for file in tls.crt tls.key scheduler-client.crt scheduler-client.key; do
  [ -f "$OUT/$file" ] && cp "$OUT/$file" "$OLD/$file"
done

if [ "$NEW_CA" = 1 ]; then
  if [ -f "$OUT/ca.crt" ]; then cp "$OUT/ca.crt" "$OUT/ca-previous.crt"; fi
  make_ca
  echo "made a new CA; the previous one stays trusted until the next renewal" >&2
elif [ -f "$OUT/ca.crt" ] && [ -f "$OUT/ca.key" ]; then
  if ! openssl x509 -in "$OUT/ca.crt" -noout -checkend $((DAYS * 86400)) >/dev/null; then
    echo "error: the CA $OUT/ca.crt expires within --days $DAYS, before the certificates it would sign: pass" \
      "--new-ca to replace it (both stay trusted during the change), or a smaller --days" >&2
    exit 1
  fi
  rm -f "$OUT/ca-previous.crt"
  echo "renewing the certificates under the existing CA $OUT/ca.crt" >&2
elif [ -f "$OUT/ca.crt" ]; then
  echo "error: $OUT/ca.key is missing: renewing under the CA $OUT/ca.crt needs its key; pass --new-ca to" \
    "replace the CA (both stay trusted during the change)" >&2
  exit 1
elif cluster_trusts_a_ca; then
  echo "error: the Secret $NAMESPACE/$SECRET already trusts a CA, but --out $OUT has none: pass --out with the" \
    "folder of that CA to renew under it, or --new-ca to replace it (both stay trusted during the change)" >&2
  exit 1
else
  make_ca
fi
# The trusted CAs: the current one, and the previous one while a CA change is under way.
cat "$OUT/ca.crt" > "$OUT/ca-bundle.crt"
if [ -f "$OUT/ca-previous.crt" ]; then cat "$OUT/ca-previous.crt" >> "$OUT/ca-bundle.crt"; fi

# The serving certificate: the names a client may dial inside the cluster.
cat >"$WORK/ext.cnf" <<EOF
basicConstraints=critical,CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=serverAuth
subjectAltName=DNS:$SERVICE,DNS:$SERVICE.$NAMESPACE,DNS:$HOST,DNS:$HOST.cluster.local
EOF
openssl req -new -nodes \
  -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 \
  -keyout "$OUT/tls.key" -out "$WORK/tls.csr" \
  -subj "/CN=$HOST" 2>/dev/null
openssl x509 -req -days "$DAYS" -sha256 \
  -in "$WORK/tls.csr" -CA "$OUT/ca.crt" -CAkey "$OUT/ca.key" -CAcreateserial -CAserial "$WORK/ca.srl" \
  -extfile "$WORK/ext.cnf" -out "$OUT/tls.crt" 2>/dev/null
openssl verify -CAfile "$OUT/ca.crt" "$OUT/tls.crt" >/dev/null

# kube-scheduler's client certificate for the extender's verbs port: client authentication only.
cat >"$WORK/client.cnf" <<EOF
basicConstraints=critical,CA:FALSE
keyUsage=critical,digitalSignature
extendedKeyUsage=clientAuth
EOF
openssl req -new -nodes \
  -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 \
  -keyout "$OUT/scheduler-client.key" -out "$WORK/client.csr" \
  -subj "/CN=tas-scheduler" 2>/dev/null
openssl x509 -req -days "$DAYS" -sha256 \
  -in "$WORK/client.csr" -CA "$OUT/ca.crt" -CAkey "$OUT/ca.key" -CAserial "$WORK/ca.srl" \
  -extfile "$WORK/client.cnf" -out "$OUT/scheduler-client.crt" 2>/dev/null
openssl verify -CAfile "$OUT/ca.crt" "$OUT/scheduler-client.crt" >/dev/null

CA_BUNDLE=$(base64 <"$OUT/ca-bundle.crt" | tr -d '\n')
echo "wrote $OUT/ca.crt, $OUT/tls.crt and $OUT/tls.key for $HOST, and kube-scheduler's client certificate" \
  "$OUT/scheduler-client.crt and .key (valid $DAYS days)" >&2

write_secrets() {  # <serving crt> <serving key> <client crt> <client key>
  kubectl -n "$NAMESPACE" create secret generic "$SECRET" --type=kubernetes.io/tls \
    --from-file=tls.crt="$1" --from-file=tls.key="$2" --from-file=ca.crt="$OUT/ca-bundle.crt" \
    --dry-run=client -o yaml | kubectl apply -f - >&2
  kubectl -n "$NAMESPACE" create secret generic "$CLIENT_SECRET" --type=kubernetes.io/tls \
    --from-file=tls.crt="$3" --from-file=tls.key="$4" --from-file=ca.crt="$OUT/ca-bundle.crt" \
    --dry-run=client -o yaml | kubectl apply -f - >&2
}

patch_webhook() {
  local names patch="" i=0 name
  if names=$(kubectl get mutatingwebhookconfiguration "$WEBHOOK" \
      -o jsonpath='{range .webhooks[*]}{.name}{"\n"}{end}' 2>/dev/null); then
    while IFS= read -r name; do
      [ -n "$name" ] || continue
      patch="$patch${patch:+,}{\"op\":\"add\",\"path\":\"/webhooks/$i/clientConfig/caBundle\",\"value\":\"$CA_BUNDLE\"}"
      i=$((i + 1))
    done <<<"$names"
    kubectl patch mutatingwebhookconfiguration "$WEBHOOK" --type=json -p "[$patch]" >&2
  else
    echo "MutatingWebhookConfiguration $WEBHOOK not found: run this script again after 'kubectl apply -k manifests/'" >&2
  fi
}

# The extender first (it serves, and trusts the client certificates), then kube-scheduler; each rollout is
# finished before the next starts.
roll() {
  local deployment
  for deployment in tas-extender tas-scheduler; do
    kubectl -n "$NAMESPACE" get deployment "$deployment" >/dev/null 2>&1 || continue
    kubectl -n "$NAMESPACE" rollout restart deployment "$deployment" >&2
    if ! kubectl -n "$NAMESPACE" rollout status deployment "$deployment" --timeout="$TIMEOUT" >&2; then
      echo "error: the rollout of deployment/$deployment did not finish within --timeout $TIMEOUT; nothing further" \
        "was restarted (kubectl -n $NAMESPACE rollout status deployment/$deployment)" >&2
      exit 1
    fi
  done
}

if [ "$APPLY" = 1 ]; then
  command -v kubectl >/dev/null || { echo "error: --apply needs kubectl" >&2; exit 1; }
  kubectl get namespace "$NAMESPACE" >/dev/null 2>&1 || kubectl create namespace "$NAMESPACE" >&2
  if [ "$NEW_CA" = 1 ] && [ -f "$OLD/tls.crt" ] && [ -f "$OLD/scheduler-client.crt" ]; then
    echo "step 1 of 2: trust both CAs, keeping the current certificates" >&2
    write_secrets "$OLD/tls.crt" "$OLD/tls.key" "$OLD/scheduler-client.crt" "$OLD/scheduler-client.key"
    patch_webhook
    roll
    echo "step 2 of 2: the certificates of the new CA" >&2
  fi
  write_secrets "$OUT/tls.crt" "$OUT/tls.key" "$OUT/scheduler-client.crt" "$OUT/scheduler-client.key"
  patch_webhook
  roll
else
  cat >&2 <<EOF
next, to install them (or run again with --apply), with CA_BUNDLE set to the last line printed:
  kubectl -n $NAMESPACE create secret generic $SECRET --type=kubernetes.io/tls \\
    --from-file=tls.crt=$OUT/tls.crt --from-file=tls.key=$OUT/tls.key --from-file=ca.crt=$OUT/ca-bundle.crt
  kubectl -n $NAMESPACE create secret generic $CLIENT_SECRET --type=kubernetes.io/tls \\
    --from-file=tls.crt=$OUT/scheduler-client.crt --from-file=tls.key=$OUT/scheduler-client.key \\
    --from-file=ca.crt=$OUT/ca-bundle.crt
  kubectl patch mutatingwebhookconfiguration $WEBHOOK --type=json \\
    -p '[{"op":"add","path":"/webhooks/0/clientConfig/caBundle","value":"'"\$CA_BUNDLE"'"}]'
EOF
fi
echo "$CA_BUNDLE"
