{{/*
Names and labels. The full name is the release name, suffixed with the
chart name unless the release name already holds it; Kubernetes names stop
at 63 characters.
*/}}
{{- define "dualca.name" -}}
{{- .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "dualca.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "dualca.selectorLabels" -}}
app.kubernetes.io/name: {{ include "dualca.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "dualca.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "dualca.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/component: ca-rotation
{{- end -}}

{{- define "dualca.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "dualca.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- required "serviceAccount.name is required when serviceAccount.create is false: the Roles are bound to it" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/*
dualca.validate fails the render on combinations the schema cannot express,
with the message dualca itself would give at start-up.
*/}}
{{- define "dualca.validate" -}}
{{- $v := .Values -}}
{{- if and (not $v.gatewaySecret.name) (not $v.bundleTargets) -}}
{{- fail "set gatewaySecret (namespace and name) or at least one of bundleTargets: dualca has nowhere to write the rotation" -}}
{{- end -}}
{{- if and $v.gatewaySecret.name (eq $v.rootSecret.namespace $v.gatewaySecret.namespace) (eq $v.rootSecret.name $v.gatewaySecret.name) -}}
{{- fail "gatewaySecret must differ from rootSecret: dualca never writes the root" -}}
{{- end -}}
{{- include "dualca.validateTargets" . -}}
{{- if and $v.clients.namespaces (not (include "dualca.clientsTracked" .)) -}}
{{- fail "clients.namespaces needs a client selection (clients.selector, clients.secretSelector or clients.issuer): without one no client is tracked" -}}
{{- end -}}
{{- $issuer := include "dualca.clientIssuer" . | fromJson -}}
{{- if and (eq $issuer.kind "Issuer") (not (has $v.rootSecret.namespace (include "dualca.clientNamespaces" . | fromJsonArray))) -}}
{{- fail (printf "clients.issuer=%s: an Issuer is namespaced, and dualca takes the one in the root Secret's namespace %s, which is not among the client namespaces: add it to clients.namespaces, or use a ClusterIssuer" $v.clients.issuer $v.rootSecret.namespace) -}}
{{- end -}}
{{- if and (gt (int $v.replicas) 1) (not $v.leaderElection.enabled) -}}
{{- fail "replicas > 1 needs leaderElection.enabled: two dualcas would race on the gateway Secret" -}}
{{- end -}}
{{- if and (not $v.deployment.enabled) (not $v.leaderElection.enabled) -}}
{{- fail "deployment.enabled=false (dualca as a sidecar) needs leaderElection.enabled: this chart cannot know how many replicas the including workload runs, and two dualcas without election would race on the gateway Secret" -}}
{{- end -}}
{{- if and (not $v.certManagement.legacy) $v.gatewaySecret.name (not $v.server.dnsNames) (not $v.server.ipAddresses) (not $v.server.withoutNames) -}}
{{- fail "server.dnsNames or server.ipAddresses is required: they are the names clients check the gateway's certificate against (set server.withoutNames=true for a certificate with none)" -}}
{{- end -}}
{{- if gt (len (include "dualca.stateSecretName" .)) 253 -}}
{{- fail "the state Secret's name is longer than 253 characters: set stateSecret.name" -}}
{{- end -}}
{{- if gt (len (include "dualca.statusConfigMapName" .)) 253 -}}
{{- fail "the status ConfigMap's name is longer than 253 characters: set statusConfigMap.name" -}}
{{- end -}}
{{- end -}}

{{/*
dualca.validateTargets refuses the targets dualca would refuse
(flags.Targets.validate), with its words: a target that is the root, the
record or the status ConfigMap, which dualca must never overwrite with a
bundle; a -cacert Secret too long a name; a Secret type the API server
gives required keys a bundle target does not hold; an issuing Secret that
is the root, the record, the gateway Secret or either -cacert Secret, or
that a bundle target names.
*/}}
{{- define "dualca.validateTargets" -}}
{{- $v := .Values -}}
{{- $secrets := dict -}}
{{- $_ := set $secrets (printf "%s/%s" $v.rootSecret.namespace $v.rootSecret.name) "rootSecret" -}}
{{- $_ := set $secrets (printf "%s/%s" .Release.Namespace (include "dualca.stateSecretName" .)) "the state Secret (stateSecret)" -}}
{{- with $v.gatewaySecret.name -}}
{{- $_ := set $secrets (printf "%s/%s" $v.gatewaySecret.namespace .) "gatewaySecret" -}}
{{- end -}}
{{- with include "dualca.cacertSecret" . | fromJson -}}
{{- if gt (len .name) 253 -}}
{{- fail (printf "gatewaySecret.form=split writes the bundle to %s/%s, too long a name for a Secret" .namespace .name) -}}
{{- end -}}
{{- $key := printf "%s/%s" .namespace .name -}}
{{- with get $secrets $key -}}
{{- fail (printf "gatewaySecret.form=split writes the bundle to %s, which is %s" $key .) -}}
{{- end -}}
{{- $_ := set $secrets $key "the split form's -cacert Secret" -}}
{{- end -}}
{{- with include "dualca.shadowSecret" . | fromJson -}}
{{- $_ := set $secrets (printf "%s/%s" .namespace .name) "the Secret Istio would prefer to the combined gateway Secret's bundle (for Istio's split form set gatewaySecret.form=split)" -}}
{{- end -}}
{{- with include "dualca.issuingSecret" . | fromJson -}}
{{- $key := printf "%s/%s" .namespace .name -}}
{{- with get $secrets $key -}}
{{- fail (printf "issuingSecret.name: %s is %s: the issuing Secret holds the root's credential and nothing else" $key .) -}}
{{- end -}}
{{- $_ := set $secrets $key "the issuing Secret (issuingSecret)" -}}
{{- end -}}
{{- $status := printf "%s/%s" .Release.Namespace (include "dualca.statusConfigMapName" .) -}}
{{- range $t := $v.bundleTargets -}}
{{- $key := printf "%s/%s" $t.namespace $t.name -}}
{{- $what := "" -}}
{{- if eq $t.kind "secret" -}}
{{- $what = get $secrets $key -}}
{{- else if eq $key $status -}}
{{- $what = "the status ConfigMap (statusConfigMap)" -}}
{{- end -}}
{{- with $what -}}
{{- fail (printf "bundleTargets: %s:%s is %s: dualca writes only the bundle there" $t.kind $key .) -}}
{{- end -}}
{{- end -}}
{{- if hasPrefix "kubernetes.io/" $v.bundleSecretType -}}
{{- fail (printf "bundleSecretType=%q: the API server requires keys of that type that a bundle target does not hold; use Opaque or a gateway's own type" $v.bundleSecretType) -}}
{{- end -}}
{{- end -}}

{{/*
dualca.anchor is the object that names the rotation (syncer.Options.Anchor),
as JSON {"namespace", "name"}: the gateway Secret, or without one the first
bundle target. The record, the status ConfigMap, the Lease and the default
client and election namespaces derive from it, as dualca derives them.
*/}}
{{- define "dualca.anchor" -}}
{{- if or .Values.gatewaySecret.name (not .Values.bundleTargets) -}}
{{- dict "namespace" .Values.gatewaySecret.namespace "name" .Values.gatewaySecret.name | toJson -}}
{{- else -}}
{{- $first := first .Values.bundleTargets -}}
{{- dict "namespace" $first.namespace "name" $first.name | toJson -}}
{{- end -}}
{{- end -}}

{{/*
dualca.anchorDisplay names the anchor for people: NAMESPACE/NAME for the
gateway Secret, KIND:NAMESPACE/NAME (the --bundle-targets form) for a
bundle target.
*/}}
{{- define "dualca.anchorDisplay" -}}
{{- if or .Values.gatewaySecret.name (not .Values.bundleTargets) -}}
{{- printf "%s/%s" .Values.gatewaySecret.namespace .Values.gatewaySecret.name -}}
{{- else -}}
{{- $first := first .Values.bundleTargets -}}
{{- printf "%s:%s/%s" $first.kind $first.namespace $first.name -}}
{{- end -}}
{{- end -}}

{{/*
dualca.cacertSecret is, in the split form, the Secret that holds the bundle
("<gateway name>-cacert" beside the gateway Secret), as JSON; {} otherwise.
dualca.shadowSecret is, in the combined form, the Secret of that name that
Istio would prefer for the bundle: dualca watches it (never writes it) and
flags it with a Warning if it exists; {} otherwise.
*/}}
{{- define "dualca.cacertSecret" -}}
{{- if and .Values.gatewaySecret.name (eq .Values.gatewaySecret.form "split") -}}
{{- dict "namespace" .Values.gatewaySecret.namespace "name" (printf "%s-cacert" .Values.gatewaySecret.name) | toJson -}}
{{- else -}}
{}
{{- end -}}
{{- end -}}

{{- define "dualca.shadowSecret" -}}
{{- if and .Values.gatewaySecret.name (ne .Values.gatewaySecret.form "split") -}}
{{- dict "namespace" .Values.gatewaySecret.namespace "name" (printf "%s-cacert" .Values.gatewaySecret.name) | toJson -}}
{{- else -}}
{}
{{- end -}}
{{- end -}}

{{/*
dualca.issuingSecret is the issuing Secret (--issuing-secret), as JSON
{"namespace", "name"}: issuingSecret.name in the root Secret's namespace,
the only one dualca accepts (the root's key goes nowhere it was not); {}
when off. dualca keeps the root's credential there for the clients' CA
Issuer, moved to a new root once the gateway trusts it: it reads it (get,
and list/watch by name), updates it and creates it when missing; it never
deletes it.
*/}}
{{- define "dualca.issuingSecret" -}}
{{- with .Values.issuingSecret.name -}}
{{- dict "namespace" $.Values.rootSecret.namespace "name" . | toJson -}}
{{- else -}}
{}
{{- end -}}
{{- end -}}

{{/*
dualca.targets are the objects dualca writes (syncer.Options.targets), as a
JSON list of {"kind": "secret"|"configmap", "namespace", "name"}: the
gateway Secret, the split form's -cacert Secret, the bundle targets. It
reads each (get, and list/watch by name), updates it and creates it when
missing.
*/}}
{{- define "dualca.targets" -}}
{{- $out := list -}}
{{- with .Values.gatewaySecret.name -}}
{{- $out = append $out (dict "kind" "secret" "namespace" $.Values.gatewaySecret.namespace "name" .) -}}
{{- end -}}
{{- with include "dualca.cacertSecret" . | fromJson -}}
{{- $out = append $out (dict "kind" "secret" "namespace" .namespace "name" .name) -}}
{{- end -}}
{{- range .Values.bundleTargets -}}
{{- $out = append $out (dict "kind" .kind "namespace" .namespace "name" .name) -}}
{{- end -}}
{{- $out | toJson -}}
{{- end -}}

{{/*
dualca's record of the rotation it wrote (--state-secret) and its public
status and operator controls (--status-configmap), both in the release
namespace: where dualca's own account writes and no gateway-Secret writer
needs to. The names default to those dualca derives from the anchor's name
(flags.DefaultStateSecret, flags.DefaultStatusConfigMap): the gateway
Secret's, else the first bundle target's.
*/}}
{{- define "dualca.stateSecretName" -}}
{{- .Values.stateSecret.name | default (printf "%s-dualca-state" (include "dualca.anchor" . | fromJson).name) -}}
{{- end -}}

{{- define "dualca.statusConfigMapName" -}}
{{- .Values.statusConfigMap.name | default (printf "%s-dualca-status" (include "dualca.anchor" . | fromJson).name) -}}
{{- end -}}

{{/*
Namespaces dualca works in, each as a JSON list: the client namespaces
(the anchor's by default, none without a selector) and the election
namespace (the anchor's by default, none without leader election).
*/}}
{{- define "dualca.clientNamespaces" -}}
{{- if include "dualca.clientsTracked" . -}}
{{- default (list (include "dualca.anchor" . | fromJson).namespace) .Values.clients.namespaces | uniq | toJson -}}
{{- else -}}
[]
{{- end -}}
{{- end -}}

{{/* dualca.clientsTracked is "true" when a client selection is given, else empty. */}}
{{- define "dualca.clientsTracked" -}}
{{- if or .Values.clients.selector .Values.clients.secretSelector .Values.clients.issuer -}}true{{- end -}}
{{- end -}}

{{/*
dualca.clientIssuer is clients.issuer as JSON: {"kind", "name"} for an
issuer of cert-manager.io, the only ones dualca reads (and the chart grants
get on); {} for none or another group's, which dualca cannot check.
*/}}
{{- define "dualca.clientIssuer" -}}
{{- $kindGroup := "" -}}{{- $name := "" -}}
{{- with .Values.clients.issuer -}}
{{- $parts := splitn "/" 2 . -}}
{{- $kindGroup = $parts._0 -}}{{- $name = $parts._1 -}}
{{- end -}}
{{- $kind := trimSuffix ".cert-manager.io" $kindGroup -}}
{{- if and $name (has $kind (list "Issuer" "ClusterIssuer")) -}}
{{- dict "kind" $kind "name" $name | toJson -}}
{{- else -}}
{}
{{- end -}}
{{- end -}}

{{- define "dualca.electionNamespace" -}}
{{- if .Values.leaderElection.enabled -}}
{{- default (include "dualca.anchor" . | fromJson).namespace .Values.leaderElection.namespace -}}
{{- end -}}
{{- end -}}

{{/* dualca.rbacNamespaces: every namespace that gets a Role (the release's holds the state Secret and status ConfigMap), sorted, once each. */}}
{{- define "dualca.rbacNamespaces" -}}
{{- $all := list .Values.rootSecret.namespace (include "dualca.anchor" . | fromJson).namespace .Release.Namespace -}}
{{- range include "dualca.targets" . | fromJsonArray -}}
{{- $all = append $all .namespace -}}
{{- end -}}
{{- $all = concat $all (include "dualca.clientNamespaces" . | fromJsonArray) -}}
{{- with include "dualca.electionNamespace" . -}}
{{- $all = append $all . -}}
{{- end -}}
{{- $all | uniq | sortAlpha | toJson -}}
{{- end -}}

{{/*
dualca.leaseName is controller-runtime's LeaderElectionID as dualca sets it
(syncer.LeaseName of the anchor): "dualca-<anchor namespace>-<anchor name>",
the anchor being the gateway Secret, else the first bundle target, so that
two rotations named alike in two namespaces never share a Lease. Past 253
characters it is cut to 242, trailing dots and dashes dropped, and the first
10 hex digits of the SHA-256 of the whole name appended after a dash.
test/chart checks the two agree.
*/}}
{{- define "dualca.leaseName" -}}
{{- $anchor := include "dualca.anchor" . | fromJson -}}
{{- $full := printf "dualca-%s-%s" $anchor.namespace $anchor.name -}}
{{- if le (len $full) 253 -}}
{{- $full -}}
{{- else -}}
{{- printf "%s-%s" (regexReplaceAll "[-.]+$" ($full | trunc 242) "") (sha256sum $full | trunc 10) -}}
{{- end -}}
{{- end -}}

{{/* dualca.args are dualca's flags, one per line, from the values. */}}
{{- define "dualca.args" -}}
{{- $v := .Values -}}
- --root-secret={{ $v.rootSecret.namespace }}/{{ $v.rootSecret.name }}
{{- if $v.gatewaySecret.name }}
- --gateway-secret={{ $v.gatewaySecret.namespace }}/{{ $v.gatewaySecret.name }}
- --gateway-form={{ $v.gatewaySecret.form }}
{{- end }}
{{- with $v.bundleTargets }}
- --bundle-targets={{ range $i, $t := . }}{{ if $i }},{{ end }}{{ $t.kind }}:{{ $t.namespace }}/{{ $t.name }}{{ end }}
- --bundle-key={{ $v.bundleKey }}
- --bundle-secret-type={{ $v.bundleSecretType }}
{{- end }}
{{- with include "dualca.issuingSecret" . | fromJson }}
- --issuing-secret={{ .namespace }}/{{ .name }}
{{- end }}
- --state-secret={{ .Release.Namespace }}/{{ include "dualca.stateSecretName" . }}
- --status-configmap={{ .Release.Namespace }}/{{ include "dualca.statusConfigMapName" . }}
{{- if $v.certManagement.legacy }}
- --cert-management-legacy
{{- end }}
- --poll-interval={{ $v.rotation.pollInterval }}
- --trust-propagation-delay={{ $v.rotation.trustPropagationDelay }}
- --server-switch-grace={{ $v.rotation.serverSwitchGrace }}
{{- with $v.server.dnsNames }}
- {{ printf "--server-dns-names=%s" (join "," .) | quote }}
{{- end }}
{{- with $v.server.ipAddresses }}
- --server-ip-addresses={{ join "," . }}
{{- end }}
- --server-key-algorithm={{ $v.server.keyAlgorithm }}
- --server-lifetime={{ $v.server.lifetime }}
{{- if $v.server.withoutNames }}
- --server-without-names
{{- end }}
{{- with $v.clients.selector }}
- {{ printf "--client-selector=%s" . | quote }}
{{- end }}
{{- with $v.clients.secretSelector }}
- {{ printf "--client-secret-selector=%s" . | quote }}
{{- end }}
{{- with $v.clients.issuer }}
- {{ printf "--client-issuer=%s" . | quote }}
{{- end }}
{{- with $v.clients.namespaces }}
- --client-namespaces={{ join "," . }}
{{- end }}
- --renewal-qps={{ $v.renewal.qps }}
- --renewal-burst={{ int $v.renewal.burst }}
- --metrics-bind-address={{ if $v.metrics.port }}:{{ int $v.metrics.port }}{{ else }}0{{ end }}
- --health-probe-bind-address={{ if $v.health.port }}:{{ int $v.health.port }}{{ else }}0{{ end }}
{{- if $v.leaderElection.enabled }}
- --leader-elect
{{- with $v.leaderElection.namespace }}
- --leader-election-namespace={{ . }}
{{- end }}
{{- end }}
- --zap-log-level={{ $v.logLevel }}
{{- with $v.logEncoder }}
- --zap-encoder={{ . }}
{{- end }}
{{- with $v.logTimeEncoding }}
- --zap-time-encoding={{ . }}
{{- end }}
{{- with $v.logStacktraceLevel }}
- --zap-stacktrace-level={{ . }}
{{- end }}
{{- range $v.extraArgs }}
- {{ . | quote }}
{{- end }}
{{- end -}}

{{/* dualca.image is repository@digest when a digest is set, else repository:tag (the appVersion by default). */}}
{{- define "dualca.image" -}}
{{- if .Values.image.digest -}}
{{ .Values.image.repository }}@{{ .Values.image.digest }}
{{- else -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}
{{- end -}}

{{/*
dualca.container is dualca's container, as one item of a containers list.
Another chart runs dualca as a sidecar of its gateway with it: make this
chart a dependency (with deployment.enabled: false) and, in the gateway's
pod spec, include it with the dependency's context:

    containers:
      - name: gateway
        ...
      {{- include "dualca.container" .Subcharts.dualca | nindent 6 }}

The container carries its own hardened security context, since the
including pod's is not this chart's to set. The chart refuses a sidecar
without leader election (leaderElection.enabled): the including workload's
replica count is not known here. Prefer the Deployment: as a sidecar,
dualca's Roles, which read the root CA's private key, belong to the
gateway pod's ServiceAccount, an internet-facing pod's.
*/}}
{{- define "dualca.container" -}}
{{- include "dualca.validate" . -}}
- name: dualca
  image: {{ include "dualca.image" . | quote }}
  imagePullPolicy: {{ .Values.image.pullPolicy }}
  args:
    {{- include "dualca.args" . | nindent 4 }}
  {{- if or .Values.metrics.port .Values.health.port }}
  ports:
    {{- if .Values.metrics.port }}
    - name: dualca-metrics
      containerPort: {{ int .Values.metrics.port }}
      protocol: TCP
    {{- end }}
    {{- if .Values.health.port }}
    - name: dualca-health
      containerPort: {{ int .Values.health.port }}
      protocol: TCP
    {{- end }}
  {{- end }}
  {{- if .Values.health.port }}
  livenessProbe:
    httpGet:
      path: /healthz
      port: dualca-health
    periodSeconds: 20
    failureThreshold: 3
  readinessProbe:
    # Ready once this replica has brought the gateway Secret in sync.
    httpGet:
      path: /readyz
      port: dualca-health
    periodSeconds: 5
    failureThreshold: 3
  {{- end }}
  {{- with .Values.resources }}
  resources:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with .Values.securityContext }}
  securityContext:
    {{- toYaml . | nindent 4 }}
  {{- end }}
{{- end -}}

{{/*
dualca.admissionPolicyName names the cluster-scoped ValidatingAdmissionPolicy
and its binding: the full name and the release namespace, unique per release.
*/}}
{{- define "dualca.admissionPolicyName" -}}
{{- printf "%s.%s" (include "dualca.fullname" .) .Release.Namespace -}}
{{- end -}}

{{/*
dualca.admissionPolicy.named is a CEL condition, true when the request's
object is one of a list of NAMESPACE/NAME: one
(request.namespace == NS && object.metadata.name == NAME) per entry,
joined by ||.
*/}}
{{- define "dualca.admissionPolicy.named" -}}
{{- $terms := list -}}
{{- range . -}}
{{- $parts := splitn "/" 2 . -}}
{{- $terms = append $terms (printf "(request.namespace == %s && object.metadata.name == %s)" ($parts._0 | quote) ($parts._1 | quote)) -}}
{{- end -}}
{{- join " ||\n        " $terms -}}
{{- end -}}
