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
{{- if and (eq $v.rootSecret.namespace $v.gatewaySecret.namespace) (eq $v.rootSecret.name $v.gatewaySecret.name) -}}
{{- fail "gatewaySecret must differ from rootSecret: dualca never writes the root" -}}
{{- end -}}
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
{{- if and (not $v.certManagement.legacy) (not $v.server.dnsNames) (not $v.server.ipAddresses) (not $v.server.withoutNames) -}}
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
dualca's record of the gateway it wrote (--state-secret) and its public
status and operator controls (--status-configmap), both in the release
namespace: where dualca's own account writes and no gateway-Secret writer
needs to. The names default to those dualca derives from the gateway
Secret's name (flags.DefaultStateSecret, flags.DefaultStatusConfigMap).
*/}}
{{- define "dualca.stateSecretName" -}}
{{- .Values.stateSecret.name | default (printf "%s-dualca-state" .Values.gatewaySecret.name) -}}
{{- end -}}

{{- define "dualca.statusConfigMapName" -}}
{{- .Values.statusConfigMap.name | default (printf "%s-dualca-status" .Values.gatewaySecret.name) -}}
{{- end -}}

{{/*
Namespaces dualca works in, each as a JSON list: the client namespaces
(the gateway's by default, none without a selector) and the election
namespace (the gateway's by default, none without leader election).
*/}}
{{- define "dualca.clientNamespaces" -}}
{{- if include "dualca.clientsTracked" . -}}
{{- default (list .Values.gatewaySecret.namespace) .Values.clients.namespaces | uniq | toJson -}}
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
{{- default .Values.gatewaySecret.namespace .Values.leaderElection.namespace -}}
{{- end -}}
{{- end -}}

{{/* dualca.rbacNamespaces: every namespace that gets a Role (the release's holds the state Secret and status ConfigMap), sorted, once each. */}}
{{- define "dualca.rbacNamespaces" -}}
{{- $all := list .Values.rootSecret.namespace .Values.gatewaySecret.namespace .Release.Namespace -}}
{{- $all = concat $all (include "dualca.clientNamespaces" . | fromJsonArray) -}}
{{- with include "dualca.electionNamespace" . -}}
{{- $all = append $all . -}}
{{- end -}}
{{- $all | uniq | sortAlpha | toJson -}}
{{- end -}}

{{/*
dualca.leaseName is controller-runtime's LeaderElectionID as dualca sets it
(syncer.LeaseName): "dualca-<gateway namespace>-<gateway name>", so that two
gateways of one name in two namespaces never share a Lease. Past 253
characters it is cut to 242, trailing dots and dashes dropped, and the first
10 hex digits of the SHA-256 of the whole name appended after a dash.
test/chart checks the two agree.
*/}}
{{- define "dualca.leaseName" -}}
{{- $full := printf "dualca-%s-%s" .Values.gatewaySecret.namespace .Values.gatewaySecret.name -}}
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
- --gateway-secret={{ $v.gatewaySecret.namespace }}/{{ $v.gatewaySecret.name }}
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
