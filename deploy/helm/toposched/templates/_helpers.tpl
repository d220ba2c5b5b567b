{{/* Names are AWS's (docs/migrate-from-aws.md), so toposched replaces AWS's components in place. */}}

{{- define "toposched.devicePlugin.namespace" -}}
{{ .Values.devicePlugin.namespaceOverride | default "kube-system" }}
{{- end }}

{{- define "toposched.scheduler.namespace" -}}
{{ .Values.scheduler.namespaceOverride | default "kube-system" }}
{{- end }}

{{- define "toposched.draDriver.namespace" -}}
{{ .Values.draDriver.namespaceOverride | default "kube-system" }}
{{- end }}

{{/* The DRA plugin's DaemonSet name and ServiceAccount: AWS's (fullnameOverride, serviceAccount.name). */}}
{{- define "toposched.draDriver.fullname" -}}
{{ .Values.draDriver.fullnameOverride | default "neuron-dra-driver-kubelet-plugin" }}
{{- end }}

{{- define "toposched.draDriver.serviceAccount" -}}
{{ .Values.draDriver.serviceAccount.name | default "neuron-dra-driver-sa" }}
{{- end }}

{{/* "true" when the cluster serves resource.k8s.io/v1: helm install asks the API server for its
     API groups; the version check (1.34+, where v1 is served by default) is what decides under
     helm template, whose built-in API list has every group whatever --kube-version says. */}}
{{- define "toposched.servesResourceV1" -}}
{{- if and (.Capabilities.APIVersions.Has "resource.k8s.io/v1") (semverCompare ">=1.34.0-0" .Capabilities.KubeVersion.Version) -}}true{{- end -}}
{{- end }}

{{/* "true" when the admission webhook of draDriver.countRequests is rendered: with the DRA plugin,
     where the cluster serves resource.k8s.io/v1 (the API of the templates it creates; 1.34+, so
     the webhooks' matchConditions, 1.30+, are served too), or when draDriver.deviceClasses=true
     says to render DRA objects anyway. */}}
{{- define "toposched.countRequests" -}}
{{- $d := .Values.draDriver -}}
{{- if and $d.enabled $d.countRequests.enabled (or (include "toposched.servesResourceV1" .) (eq (toString $d.deviceClasses) "true")) -}}true{{- end -}}
{{- end }}

{{/* The webhooks' matchCondition asks-neuron: true when a container or init container asks an
     extended resource the webhook rewrites, so no other pod waits on, or is refused by, the
     webhook. Every field below containers is optional, and a missing one read without has() is an
     evaluation error, which the API server treats as the webhook's failurePolicy (Fail: refused).
     Init containers too: the webhook refuses them with the reason. */}}
{{- define "toposched.countRequests.asksNeuron" -}}
{{- $names := `["aws.amazon.com/neuron", "aws.amazon.com/neurondevice", "aws.amazon.com/neuroncore"]` -}}
(object.spec.containers + (has(object.spec.initContainers) ? object.spec.initContainers : [])).exists(c,
has(c.resources) && (
(has(c.resources.limits) && c.resources.limits.exists(r, r in {{ $names }})) ||
(has(c.resources.requests) && c.resources.requests.exists(r, r in {{ $names }}))))
{{- end }}

{{- define "toposched.customScheduler.namespace" -}}
{{ .Values.scheduler.customScheduler.namespaceOverride | default "kube-system" }}
{{- end }}

{{/* labels: {app.kubernetes.io/name: toposched, app.kubernetes.io/component: COMPONENT} */}}
{{- define "toposched.labels" -}}
app.kubernetes.io/name: toposched, app.kubernetes.io/component: {{ . }}
{{- end }}

{{- define "toposched.image" -}}
{{ printf "%s:%s" .repository (toString .tag) }}
{{- end }}

{{/* my-scheduler's image: scheduler.customScheduler.image, an empty tag meaning the cluster's own
     version as vMAJOR.MINOR.PATCH (kube-scheduler's release tags on registry.k8s.io): EKS reports
     v1.34.4-eks-3025e55, GKE v1.33.5-gke.1201000, both with a suffix no registry.k8s.io tag has. */}}
{{- define "toposched.myScheduler.image" -}}
{{- $i := .Values.scheduler.customScheduler.image -}}
{{- if not $i.repository -}}
{{- fail "scheduler.customScheduler.image.repository is empty: name the kube-scheduler image (default registry.k8s.io/kube-scheduler)" -}}
{{- end -}}
{{- $tag := toString ($i.tag | default "") -}}
{{- if not $tag -}}
{{- $kube := .Capabilities.KubeVersion.Version -}}
{{- $tag = regexFind "^v?[0-9]+[.][0-9]+[.][0-9]+" $kube | trimPrefix "v" -}}
{{- if not $tag -}}
{{- fail (printf "scheduler.customScheduler.image.tag is empty and the cluster's version %q has no MAJOR.MINOR.PATCH to take the kube-scheduler tag from: set scheduler.customScheduler.image.tag (or, with helm template, give --kube-version as MAJOR.MINOR.PATCH)" $kube) -}}
{{- end -}}
{{- $tag = printf "v%s" $tag -}}
{{- end -}}
{{ printf "%s:%s" $i.repository $tag }}
{{- end }}

{{/* Refuses combinations that cannot work, with the reason (AWS's chart has the same rules). */}}
{{- define "toposched.validate" -}}
{{- $s := .Values.scheduler -}}
{{- if and .Values.draDriver.enabled (not (has (toString .Values.draDriver.deviceClasses) (list "auto" "true" "false"))) -}}
{{- fail (printf "draDriver.deviceClasses=%v: expected auto (where the cluster serves resource.k8s.io/v1), true or false" .Values.draDriver.deviceClasses) -}}
{{- end -}}
{{- if and $s.enabled (not .Values.devicePlugin.enabled) -}}
{{- fail "scheduler.enabled=true needs devicePlugin.enabled=true: the device plugin hands each container the ids the extender chose" -}}
{{- end -}}
{{- if and $s.enabled $s.customScheduler.enabled $s.defaultScheduler.enabled -}}
{{- fail "scheduler.customScheduler.enabled and scheduler.defaultScheduler.enabled are mutually exclusive: set scheduler.customScheduler.enabled=false for the default-scheduler mode" -}}
{{- end -}}
{{- if and $s.enabled (not $s.customScheduler.enabled) (not $s.defaultScheduler.enabled) -}}
{{- fail "scheduler.enabled=true needs one of scheduler.customScheduler.enabled or scheduler.defaultScheduler.enabled" -}}
{{- end -}}
{{- if and (gt (int .Values.extender.replicas) 1) (not .Values.extender.leaderElection.enabled) -}}
{{- fail "extender.replicas > 1 needs extender.leaderElection.enabled=true: replicas without a leader would each give out the same devices" -}}
{{- end -}}
{{- $cr := .Values.draDriver.countRequests -}}
{{- if and .Values.draDriver.enabled $cr.enabled -}}
{{- if not (has (toString $cr.failurePolicy) (list "Fail" "Ignore")) -}}
{{- fail (printf "draDriver.countRequests.failurePolicy=%v: expected Fail (an opted-in pod is refused while the webhook is down) or Ignore (it is let through unrewritten)" $cr.failurePolicy) -}}
{{- end -}}
{{- $timeout := toString $cr.timeoutSeconds -}}
{{- if or (not (regexMatch "^[0-9]+$" $timeout)) (lt (int $timeout) 1) (gt (int $timeout) 30) -}}
{{- fail (printf "draDriver.countRequests.timeoutSeconds=%v: expected 1 to 30 (the API server allows no more)" $cr.timeoutSeconds) -}}
{{- end -}}
{{- if ne (empty $cr.tls.secretName) (empty $cr.tls.caBundle) -}}
{{- fail "draDriver.countRequests.tls.secretName and draDriver.countRequests.tls.caBundle go together: your own Secret (tls.crt, tls.key) needs the base64 PEM CA that signed it for the webhooks' caBundle; or leave both empty and the chart generates them" -}}
{{- end -}}
{{- end -}}
{{- $t := .Values.extender.tls -}}
{{- if and $s.enabled (not $s.defaultScheduler.enabled) $t.enabled $t.secretName $t.clientAuth (not $t.clientSecretName) -}}
{{- fail "extender.tls.secretName (your own certificates) with extender.tls.clientAuth=true needs extender.tls.clientSecretName: a Secret in my-scheduler's namespace with the client certificate it presents (tls.crt, tls.key, ca.crt); or leave both empty and the chart generates them" -}}
{{- end -}}
{{- if and $t.enabled $t.clientSecretName (not $t.secretName) -}}
{{- fail "extender.tls.clientSecretName needs extender.tls.secretName: give both of your own certificates, or neither and the chart generates them" -}}
{{- end -}}
{{- if and $s.enabled (not $s.defaultScheduler.enabled) (not $t.enabled) (not .Values.extender.allowInsecureHttp) -}}
{{- fail "extender.tls.enabled=false would serve filter and bind in plain HTTP to anything that reaches the Pod network: keep TLS (the default), or set extender.allowInsecureHttp=true to accept that" -}}
{{- end -}}
{{- end }}

{{/* "true" when the extender serves TLS: the second-scheduler mode with extender.tls.enabled
     (the default-scheduler mode serves plain HTTP on 127.0.0.1 only). */}}
{{- define "toposched.extenderTls" -}}
{{- if and .Values.extender.tls.enabled (not .Values.scheduler.defaultScheduler.enabled) -}}true{{- end -}}
{{- end }}

{{/* The Secret holding my-scheduler's client certificate for the extender; empty when none. */}}
{{- define "toposched.clientTlsSecret" -}}
{{- $t := .Values.extender.tls -}}
{{- if include "toposched.extenderTls" . -}}
{{- if not $t.secretName -}}my-scheduler-extender-client{{- else if $t.clientSecretName -}}{{ $t.clientSecretName }}{{- end -}}
{{- end -}}
{{- end }}

{{/* Where my-scheduler mounts that Secret. */}}
{{- define "toposched.clientTlsDir" -}}
/etc/kubernetes/my-scheduler/extender-tls
{{- end }}

{{/* The extender's URL as kube-scheduler reaches it in each mode. */}}
{{- define "toposched.extenderUrl" -}}
{{- if .Values.scheduler.defaultScheduler.enabled -}}
http://127.0.0.1:{{ .Values.scheduler.defaultScheduler.port }}
{{- else -}}
{{ ternary "https" "http" .Values.extender.tls.enabled }}://k8s-neuron-scheduler.{{ include "toposched.scheduler.namespace" . }}.svc.cluster.local:{{ .Values.extender.port }}
{{- end -}}
{{- end }}

{{/* The extender entry of a KubeSchedulerConfiguration, the same in both modes but for the URL. */}}
{{- define "toposched.extenderEntry" -}}
extenders:
  - urlPrefix: {{ include "toposched.extenderUrl" . }}
    filterVerb: filter
    {{- if eq (toString .Values.extender.filterAnswer) "feasible" }}
    prioritizeVerb: prioritize
    {{- end }}
    preemptVerb: preempt
    bindVerb: bind
    weight: {{ .Values.extender.weight }}
    enableHTTPS: {{ include "toposched.extenderTls" . | eq "true" }}
    {{- $client := include "toposched.clientTlsSecret" . }}
    {{- if and (include "toposched.extenderTls" .) (or $client .Values.extender.tls.caBundle) }}
    tlsConfig:
      insecure: false
      {{- if $client }}
      certFile: {{ include "toposched.clientTlsDir" . }}/tls.crt
      keyFile: {{ include "toposched.clientTlsDir" . }}/tls.key
      {{- end }}
      {{- if .Values.extender.tls.caBundle }}
      caData: {{ .Values.extender.tls.caBundle }}
      {{- else }}
      caFile: {{ include "toposched.clientTlsDir" . }}/ca.crt
      {{- end }}
    {{- end }}
    nodeCacheCapable: true
    httpTimeout: {{ .Values.extender.httpTimeout }}
    ignorable: false
    managedResources:
      - name: aws.amazon.com/neuron
        ignoredByScheduler: false
      - name: aws.amazon.com/neuroncore
        ignoredByScheduler: false
{{- end }}

{{/* The extender's container arguments after `toposched extender`. */}}
{{- define "toposched.extenderArgs" -}}
{{- $e := .Values.extender -}}
{{- $args := list "extender" "--listen" -}}
{{- if .Values.scheduler.defaultScheduler.enabled -}}
{{- $args = append $args (printf "127.0.0.1:%v" .Values.scheduler.defaultScheduler.port) -}}
{{- else -}}
{{- $args = append $args (printf "0.0.0.0:%v" $e.port) -}}
{{- if $e.tls.enabled -}}
{{- $args = concat $args (list "--tls-cert-file" "/etc/toposched/tls/tls.crt" "--tls-key-file" "/etc/toposched/tls/tls.key") -}}
{{- if $e.tls.clientAuth -}}
{{- $args = concat $args (list "--tls-client-ca-file" "/etc/toposched/tls/ca.crt") -}}
{{- end -}}
{{- else -}}
{{- $args = append $args "--allow-insecure-http" -}}
{{- end -}}
{{- end -}}
{{- if and (not .Values.scheduler.defaultScheduler.enabled) $e.leaderElection.enabled -}}
{{- $le := $e.leaderElection -}}
{{- $args = concat $args (list "--leader-elect=true" "--leader-elect-lease-duration" $le.leaseDuration "--leader-elect-renew-deadline" $le.renewDeadline "--leader-elect-retry-period" $le.retryPeriod "--leader-elect-resource-name" $le.resourceName "--leader-elect-resource-namespace" (include "toposched.scheduler.namespace" .)) -}}
{{- end -}}
{{- if $e.viewsPort -}}
{{- $args = concat $args (list "--views-listen" (printf "127.0.0.1:%v" $e.viewsPort)) -}}
{{- end -}}
{{- $args = concat $args (list "--policy" (toString $e.scoringPolicy)) -}}
{{- if ne (toString $e.onDeviceFailure) "event" -}}
{{- $args = concat $args (list "--on-device-failure" (toString $e.onDeviceFailure)) -}}
{{- end -}}
{{- if $e.holdBackHours -}}
{{- $args = concat $args (list "--hold-back-hours" (toString $e.holdBackHours)) -}}
{{- end -}}
{{- if ne (toString $e.filterAnswer) "best" -}}
{{- $args = concat $args (list "--filter-answer" (toString $e.filterAnswer)) -}}
{{- end -}}
{{- if ne (toString $e.logLevel) "info" -}}
{{- $args = concat $args (list "--log-level" (toString $e.logLevel)) -}}
{{- end -}}
{{- $args = concat $args $e.extraArgs -}}
{{- $args | toJson -}}
{{- end }}

{{/* my-scheduler's KubeSchedulerConfiguration (ConfigMap my-scheduler-config). */}}
{{- /* The KubeSchedulerConfiguration version the cluster's scheduler reads: the value when set,
     else from the cluster's version (helm install/upgrade: the API server's; helm template:
     --kube-version): v1 from 1.25, v1beta3 on 1.23-1.24, v1beta1 before (1.19-1.22). */ -}}
{{- define "toposched.schedulerConfigApiVersion" -}}
{{- $root := index . 0 }}{{- $set := index . 1 }}
{{- if $set }}{{ $set }}
{{- else if semverCompare ">=1.25-0" $root.Capabilities.KubeVersion.Version }}v1
{{- else if semverCompare ">=1.23-0" $root.Capabilities.KubeVersion.Version }}v1beta3
{{- else }}v1beta1
{{- end }}
{{- end }}

{{- define "toposched.myScheduler.config" -}}
apiVersion: kubescheduler.config.k8s.io/{{ include "toposched.schedulerConfigApiVersion" (list . .Values.scheduler.customScheduler.configApiVersion) }}
kind: KubeSchedulerConfiguration
leaderElection:
  leaderElect: true
  resourceNamespace: {{ include "toposched.customScheduler.namespace" . }}
  resourceName: my-scheduler
clientConnection:
  qps: 100
  burst: 200
percentageOfNodesToScore: 100
profiles:
  - schedulerName: my-scheduler
{{ include "toposched.extenderEntry" . }}
{{- end }}

{{/* The configuration for the cluster's own kube-scheduler (default-scheduler mode). */}}
{{- define "toposched.defaultScheduler.config" -}}
apiVersion: kubescheduler.config.k8s.io/{{ include "toposched.schedulerConfigApiVersion" (list . .Values.scheduler.defaultScheduler.configApiVersion) }}
kind: KubeSchedulerConfiguration
clientConnection:
  kubeconfig: {{ .Values.scheduler.defaultScheduler.kubeconfig }}
{{ include "toposched.extenderEntry" . }}
{{- end }}
