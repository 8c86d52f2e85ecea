#!/usr/bin/env bash
# TLS for tas-extender: its serving certificate (the admission webhook's port and the extender verbs' port) and
# kube-scheduler's client certificate, which the verbs port requires (the extender trusts the CA for it).
#
# Creates a private CA and a certificate for the Service DNS names <service>.<namespace>.svc (and the shorter and
# longer forms), signed by that CA, in --out; and a client certificate (CN tas-scheduler, client auth only) signed
# by the same CA, as scheduler-client.crt and scheduler-client.key. Prints the webhook caBundle (base64 of ca.crt) on stdout; every other
# message goes to stderr, so `CA_BUNDLE=$(scripts/gen-webhook-cert.sh)` works.
#
# With --apply it also, through kubectl:
#   - creates the namespace if it is missing,
#   - writes the Secret <secret> (type kubernetes.io/tls: tls.crt, tls.key, ca.crt) the Deployments mount,
#   - writes the Secret <client-secret> (kube-scheduler's client certificate: tls.crt, tls.key, ca.crt),
#   - patches caBundle into every webhook of the MutatingWebhookConfiguration <webhook>, if it exists yet,
#   - restarts the Deployments tas-extender and tas-scheduler, if they exist, so they load the new files.
# Run it again to rotate the certificate (before --days run out).
set -euo pipefail

NAMESPACE=tas-system
SERVICE=tas-extender
SECRET=tas-extender-tls
CLIENT_SECRET=tas-scheduler-client-tls
WEBHOOK=tas-extender
OUT=./tls
DAYS=365
APPLY=0

usage() {
  cat >&2 <<EOF
usage: $0 [--namespace NS] [--service NAME] [--secret NAME] [--client-secret NAME] [--webhook NAME] [--out DIR]
          [--days N] [--apply]

  --namespace NS   namespace of the Service and the Secret            (default: $NAMESPACE)
  --service NAME   Service the API server and kube-scheduler dial     (default: $SERVICE)
  --secret NAME    Secret the Deployments mount                        (default: $SECRET)
  --client-secret NAME  kube-scheduler's client certificate Secret    (default: $CLIENT_SECRET)
  --webhook NAME   MutatingWebhookConfiguration to patch               (default: $WEBHOOK)
  --out DIR        where ca.crt, ca.key, tls.crt, tls.key are written  (default: $OUT)
  --days N         validity of the CA and the certificate              (default: $DAYS)
  --apply          write the Secret and the caBundle with kubectl
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
    --apply) APPLY=1; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "error: unknown argument '$1'" >&2; usage; exit 2 ;;
  esac
done

case "$DAYS" in
  ''|*[!0-9]*|0) echo "error: --days must be a positive integer, got '$DAYS'" >&2; exit 2 ;;
esac
command -v openssl >/dev/null || { echo "error: openssl is required" >&2; exit 1; }

HOST="$SERVICE.$NAMESPACE.svc"
mkdir -p "$OUT"
umask 077
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

# The CA: ECDSA P-256, allowed to sign certificates only.
openssl req -x509 -new -nodes -days "$DAYS" \
  -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 \
  -keyout "$OUT/ca.key" -out "$OUT/ca.crt" \
  -subj "/CN=$SERVICE-ca" \
  -addext "basicConstraints=critical,CA:TRUE" \
  -addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null

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

CA_BUNDLE=$(base64 <"$OUT/ca.crt" | tr -d '\n')
echo "wrote $OUT/ca.crt, $OUT/tls.crt and $OUT/tls.key for $HOST, and kube-scheduler's client certificate" \
  "$OUT/scheduler-client.crt and .key (valid $DAYS days)" >&2

if [ "$APPLY" = 1 ]; then
  command -v kubectl >/dev/null || { echo "error: --apply needs kubectl" >&2; exit 1; }
  kubectl get namespace "$NAMESPACE" >/dev/null 2>&1 || kubectl create namespace "$NAMESPACE" >&2
  kubectl -n "$NAMESPACE" create secret generic "$SECRET" --type=kubernetes.io/tls \
    --from-file=tls.crt="$OUT/tls.crt" --from-file=tls.key="$OUT/tls.key" --from-file=ca.crt="$OUT/ca.crt" \
    --dry-run=client -o yaml | kubectl apply -f - >&2
  kubectl -n "$NAMESPACE" create secret generic "$CLIENT_SECRET" --type=kubernetes.io/tls \
    --from-file=tls.crt="$OUT/scheduler-client.crt" --from-file=tls.key="$OUT/scheduler-client.key" \
    --from-file=ca.crt="$OUT/ca.crt" --dry-run=client -o yaml | kubectl apply -f - >&2
  if names=$(kubectl get mutatingwebhookconfiguration "$WEBHOOK" \
      -o jsonpath='{range .webhooks[*]}{.name}{"\n"}{end}' 2>/dev/null); then
    patch="" i=0
    while IFS= read -r name; do
      [ -n "$name" ] || continue
      patch="$patch${patch:+,}{\"op\":\"add\",\"path\":\"/webhooks/$i/clientConfig/caBundle\",\"value\":\"$CA_BUNDLE\"}"
      i=$((i + 1))
    done <<<"$names"
    kubectl patch mutatingwebhookconfiguration "$WEBHOOK" --type=json -p "[$patch]" >&2
  else
    echo "MutatingWebhookConfiguration $WEBHOOK not found: run this script again after 'kubectl apply -k manifests/'" >&2
  fi
  for deployment in tas-extender tas-scheduler; do
    if kubectl -n "$NAMESPACE" get deployment "$deployment" >/dev/null 2>&1; then
      kubectl -n "$NAMESPACE" rollout restart deployment "$deployment" >&2
    fi
  done
else
  cat >&2 <<EOF
next, to install them (or run again with --apply), with CA_BUNDLE set to the last line printed:
  kubectl -n $NAMESPACE create secret generic $SECRET --type=kubernetes.io/tls \\
    --from-file=tls.crt=$OUT/tls.crt --from-file=tls.key=$OUT/tls.key --from-file=ca.crt=$OUT/ca.crt
  kubectl -n $NAMESPACE create secret generic $CLIENT_SECRET --type=kubernetes.io/tls \
    --from-file=tls.crt=$OUT/scheduler-client.crt --from-file=tls.key=$OUT/scheduler-client.key \
    --from-file=ca.crt=$OUT/ca.crt
  kubectl patch mutatingwebhookconfiguration $WEBHOOK --type=json \\
    -p '[{"op":"add","path":"/webhooks/0/clientConfig/caBundle","value":"'"\$CA_BUNDLE"'"}]'
EOF
fi
echo "$CA_BUNDLE"
