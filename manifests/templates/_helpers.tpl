{{/*
Helpers shared by the templates. internal/manifests/ renders the same objects for
`meshcnictl install-cni`; test/cli/helm.test.ts holds the two to equality.
*/}}

{{/* The labels meshcni puts on every object. */}}
{{- define "meshcni.ownLabels" -}}
app.kubernetes.io/name: meshcni
app.kubernetes.io/part-of: meshcni
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
meshcni.io/cni-resource: "true"
{{- end }}

{{/* Every object's labels: meshcni's own and commonLabels (which may not name meshcni's own). */}}
{{- define "meshcni.labels" -}}
{{- toYaml (merge (include "meshcni.ownLabels" . | fromYaml) (.Values.commonLabels | default dict)) }}
{{- end }}

{{- define "meshcni.platformDirs" -}}
{{- $p := dict
  "gke" (dict "bin" "/home/kubernetes/bin" "net" "/etc/cni/net.d")
  "openshift" (dict "bin" "/var/lib/cni/bin" "net" "/var/run/multus/cni/net.d")
  "k3s" (dict "bin" "/var/lib/rancher/k3s/data/cni" "net" "/var/lib/rancher/k3s/agent/etc/cni/net.d")
  "" (dict "bin" "/opt/cni/bin" "net" "/etc/cni/net.d") -}}
{{- if not (hasKey $p .Values.platform) }}
{{- fail (printf "platform %q: must be one of gke, openshift, k3s (or empty)" .Values.platform) }}
{{- end }}
{{- toJson (get $p .Values.platform) -}}
{{- end }}

{{/* The host's CNI plugin folder. */}}
{{- define "meshcni.binDir" -}}
{{- $d := .Values.cniBinDir | default (include "meshcni.platformDirs" . | fromJson).bin -}}
{{- regexReplaceAll "(.)/+$" $d "${1}" -}}
{{- end }}

{{/* The host's CNI config folder. */}}
{{- define "meshcni.netDir" -}}
{{- $d := .Values.cniConfDir | default (include "meshcni.platformDirs" . | fromJson).net -}}
{{- regexReplaceAll "(.)/+$" $d "${1}" -}}
{{- end }}

{{/* image when set; else hub/meshcni pinned by digest when one is known, else by tag. */}}
{{- define "meshcni.image" -}}
{{- if .Values.image -}}
{{- .Values.image -}}
{{- else if .Values.digest -}}
{{- printf "%s/meshcni@%s" .Values.hub .Values.digest -}}
{{- else -}}
{{- printf "%s/meshcni:%s" .Values.hub (.Values.tag | default .Chart.AppVersion) -}}
{{- end -}}
{{- end }}

{{/*
The plugin's conflist entry (internal/config/entry.ts entryFromOptions): both mesh sections,
the chosen mesh's carrying the settings. toPrettyJson sorts keys like renderEntryJson.
*/}}
{{- define "meshcni.entry" -}}
{{- $v := .Values -}}
{{- if and (eq $v.mesh "istio") (or $v.skipInboundPorts $v.skipOutboundPorts $v.redirectPorts $v.ipv6) }}
{{- fail "skipInboundPorts, skipOutboundPorts, redirectPorts and ipv6 apply to mesh linkerd only; Istio takes them from the pods' annotations" }}
{{- end }}
{{- $linkerd := dict "incoming-proxy-port" 4143 "outgoing-proxy-port" 4140 "proxy-uid" 2102 "inbound-ports-to-ignore" (list "4191" "4190") "iptables-mode" "auto" -}}
{{- $istio := dict -}}
{{- if eq $v.mesh "linkerd" -}}
  {{- if not (kindIs "invalid" $v.inboundPort) }}{{ $_ := set $linkerd "incoming-proxy-port" (int64 $v.inboundPort) }}{{ end -}}
  {{- if not (kindIs "invalid" $v.outboundPort) }}{{ $_ := set $linkerd "outgoing-proxy-port" (int64 $v.outboundPort) }}{{ end -}}
  {{- if not (kindIs "invalid" $v.proxyUID) }}{{ $_ := set $linkerd "proxy-uid" (int64 $v.proxyUID) }}{{ end -}}
  {{- if and (not (kindIs "invalid" $v.proxyGID)) (ge (int64 $v.proxyGID) 0) }}{{ $_ := set $linkerd "proxy-gid" (int64 $v.proxyGID) }}{{ end -}}
  {{- if $v.redirectPorts -}}
    {{- $ports := list -}}
    {{- range $v.redirectPorts }}{{ $ports = append $ports (int64 .) }}{{ end -}}
    {{- $_ := set $linkerd "ports-to-redirect" $ports -}}
  {{- end -}}
  {{- if $v.skipInboundPorts -}}
    {{- $ports := list "4191" "4190" -}}
    {{- range $v.skipInboundPorts }}{{ $ports = append $ports (toString .) }}{{ end -}}
    {{- $_ := set $linkerd "inbound-ports-to-ignore" $ports -}}
  {{- end -}}
  {{- if $v.skipOutboundPorts -}}
    {{- $ports := list -}}
    {{- range $v.skipOutboundPorts }}{{ $ports = append $ports (toString .) }}{{ end -}}
    {{- $_ := set $linkerd "outbound-ports-to-ignore" $ports -}}
  {{- end -}}
  {{- if $v.useWaitFlag }}{{ $_ := set $linkerd "use-wait-flag" true }}{{ end -}}
  {{- $_ := set $linkerd "iptables-mode" $v.iptablesMode -}}
  {{- if $v.ipv6 }}{{ $_ := set $linkerd "ipv6" true }}{{ end -}}
{{- else -}}
  {{- if not (kindIs "invalid" $v.outboundPort) }}{{ $_ := set $istio "proxy-port" (int64 $v.outboundPort) }}{{ end -}}
  {{- if not (kindIs "invalid" $v.inboundPort) }}{{ $_ := set $istio "inbound-capture-port" (int64 $v.inboundPort) }}{{ end -}}
  {{- if not (kindIs "invalid" $v.proxyUID) }}{{ $_ := set $istio "proxy-uid" (int64 $v.proxyUID) }}{{ end -}}
  {{- if not (kindIs "invalid" $v.proxyGID) }}{{ $_ := set $istio "proxy-gid" (int64 $v.proxyGID) }}{{ end -}}
  {{- if $v.useWaitFlag }}{{ $_ := set $istio "use-wait-flag" true }}{{ end -}}
  {{- if ne $v.iptablesMode "auto" }}{{ $_ := set $istio "iptables-mode" $v.iptablesMode }}{{ end -}}
{{- end -}}
{{- $exclude := $v.excludeNamespaces -}}
{{- if kindIs "invalid" $exclude -}}
  {{- $exclude = ternary (list "istio-system" "kube-system") (list) (eq $v.mesh "istio") -}}
{{- end -}}
{{- $kubernetes := dict "kubeconfig" (printf "%s/ZZZ-meshcni-kubeconfig" (include "meshcni.netDir" .)) "exclude_namespaces" $exclude -}}
{{- $entry := dict "type" "meshcni" "name" "meshcni" "log_level" $v.logLevel "mesh" $v.mesh "kubernetes" $kubernetes "linkerd" $linkerd "istio" $istio -}}
{{- toPrettyJson $entry -}}
{{- end }}

{{/* The installer's folder switches. */}}
{{- define "meshcni.installerDirArgs" -}}
- --host-net-dir
- /host/etc/cni/net.d
- --host-bin-dir
- /host/opt/cni/bin
- --dest-net-dir
- {{ include "meshcni.netDir" . }}
- --dest-bin-dir
- {{ include "meshcni.binDir" . }}
{{- if .Values.cniConfFileName }}
- --conf-name
- {{ .Values.cniConfFileName | quote }}
{{- end }}
{{- end }}
