{{/* The image both containers run: repository@digest when a digest is set, else repository:tag. */}}
{{- define "kube-proxy-ipvs.image" -}}
{{- if .Values.image.digest -}}
{{ .Values.image.repository }}@{{ .Values.image.digest }}
{{- else -}}
{{ .Values.image.repository }}:{{ .Values.image.tag }}
{{- end -}}
{{- end -}}

{{/* The port of a "host:port" bind address. */}}
{{- define "kube-proxy-ipvs.port" -}}
{{- splitList ":" . | last -}}
{{- end -}}

{{/* The KubeProxyConfiguration: the values' config, with the fields only the chart decides. */}}
{{- define "kube-proxy-ipvs.config" -}}
{{- $config := deepCopy .Values.config -}}
{{- $_ := set $config "apiVersion" "kubeproxy.config.k8s.io/v1alpha1" -}}
{{- $_ := set $config "kind" "KubeProxyConfiguration" -}}
{{- $_ := set $config "mode" "ipvs" -}}
{{- $client := get $config "clientConnection" | default dict -}}
{{- $_ := set $client "kubeconfig" "/var/lib/kube-proxy-ipvs/kubeconfig.conf" -}}
{{- $_ := set $config "clientConnection" $client -}}
{{- toYaml $config -}}
{{- end -}}
