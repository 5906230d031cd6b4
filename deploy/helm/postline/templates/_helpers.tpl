{{/* Chart name, overridable. */}}
{{- define "postline.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Release-scoped prefix of every resource name; the components append -worker and so on. */}}
{{- define "postline.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 50 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 50 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 50 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/* Labels of every resource. */}}
{{- define "postline.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "postline.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/* Labels that select the release's pods; a component adds app.kubernetes.io/component. */}}
{{- define "postline.selectorLabels" -}}
app.kubernetes.io/name: {{ include "postline.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "postline.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{/* The Secret the Deployments read credentials from. */}}
{{- define "postline.secretName" -}}
{{- default (include "postline.fullname" .) .Values.secret.existingSecret }}
{{- end }}

{{/*
The Secret the hooks read: pre-install hooks run before the release's own Secret exists, so the
chart writes a hook Secret of its own unless an existing one is named.
*/}}
{{- define "postline.hookSecretName" -}}
{{- if .Values.secret.existingSecret }}
{{- .Values.secret.existingSecret }}
{{- else }}
{{- printf "%s-hooks" (include "postline.fullname" .) }}
{{- end }}
{{- end }}

{{/* Checks across values that the schema cannot express; each failure names the values to change. */}}
{{- define "postline.validate" -}}
{{- $partitions := int .Values.kafka.partitions }}
{{- $keda := .Values.autoscaling.keda }}
{{- $maxReplicas := int .Values.worker.replicas }}
{{- if $keda.enabled }}
{{- $maxReplicas = int $keda.maxReplicas }}
{{- if gt $maxReplicas $partitions }}
{{- fail (printf "autoscaling.keda.maxReplicas %d exceeds kafka.partitions %d: a worker beyond the partition count of %s gets no partition and sits idle" $maxReplicas $partitions .Values.kafka.jobsTopic) }}
{{- end }}
{{- if gt (int $keda.minReplicas) $maxReplicas }}
{{- fail (printf "autoscaling.keda.minReplicas %d exceeds autoscaling.keda.maxReplicas %d" (int $keda.minReplicas) $maxReplicas) }}
{{- end }}
{{- else if gt $maxReplicas $partitions }}
{{- fail (printf "worker.replicas %d exceeds kafka.partitions %d: a worker beyond the partition count of %s gets no partition and sits idle" $maxReplicas $partitions .Values.kafka.jobsTopic) }}
{{- end }}
{{- $budget := int .Values.relay.connectionBudget }}
{{- $senders := int (default 16 (index (default dict .Values.worker.settings) "POSTLINE_SENDERS")) }}
{{- if and (gt $budget 0) (gt (mul $maxReplicas $senders) $budget) }}
{{- fail (printf "%d worker replicas x POSTLINE_SENDERS %d = %d relay connections exceed relay.connectionBudget %d: lower the replicas (autoscaling.keda.maxReplicas) or the senders; more only adds throttling" $maxReplicas $senders (mul $maxReplicas $senders) $budget) }}
{{- end }}
{{- if and (not .Values.secret.existingSecret) (not .Values.secret.databaseURL) }}
{{- fail "secret.databaseURL is required unless secret.existingSecret names a Secret holding it" }}
{{- end }}
{{- /* The Kafka connection: the checks kafkaconn would make at start, made before anything runs. */}}
{{- $k := .Values.kafka }}
{{- $tls := include "postline.kafkaTLSMode" . }}
{{- if and $k.tls.ca.secretName $k.tls.ca.configMapName }}
{{- fail "kafka.tls.ca: set secretName or configMapName, not both" }}
{{- end }}
{{- if and (eq $tls "off") (or $k.tls.ca.secretName $k.tls.ca.configMapName $k.tls.clientCertSecret $k.tls.serverName $k.tls.insecureSkipVerify) }}
{{- fail "kafka.tls.mode is off, yet kafka.tls sets a CA, a client certificate, a server name or insecureSkipVerify: set kafka.tls.mode to on (or auto), or drop them" }}
{{- end }}
{{- if $k.sasl.mechanism }}
{{- if not $k.sasl.username }}
{{- fail (printf "kafka.sasl.mechanism %s needs kafka.sasl.username" $k.sasl.mechanism) }}
{{- end }}
{{- if and (not .Values.secret.existingSecret) (not .Values.secret.kafkaSASLPassword) }}
{{- fail (printf "kafka.sasl.mechanism %s needs secret.kafkaSASLPassword, or secret.existingSecret holding the key %s" $k.sasl.mechanism .Values.secret.keys.kafkaSASLPassword) }}
{{- end }}
{{- if and (eq (upper $k.sasl.mechanism) "PLAIN") (eq $tls "off") }}
{{- fail "kafka.sasl.mechanism PLAIN sends the password in clear: set kafka.tls.mode to on (or auto), or use SCRAM-SHA-512" }}
{{- end }}
{{- else if $k.sasl.username }}
{{- fail "kafka.sasl.username is set but kafka.sasl.mechanism is empty" }}
{{- end }}
{{- include "postline.validateOutcomes" . }}
{{- if and .Values.console.enabled (not .Values.console.tls.secretName) }}
{{- fail "console.enabled needs console.tls.secretName: a kubernetes.io/tls Secret with tls.crt and tls.key (the console serves plain HTTP on loopback only)" }}
{{- end }}
{{- end }}

{{/* Where the Kafka files (CA, client certificate, SASL password) are mounted. */}}
{{- define "postline.kafkaDir" -}}
/etc/postline/kafka
{{- end }}

{{/* kafka.tls.mode as the binaries spell it: YAML reads a bare on or off as a boolean. */}}
{{- define "postline.kafkaTLSMode" -}}
{{- $mode := .Values.kafka.tls.mode }}
{{- if kindIs "bool" $mode }}
{{- ternary "on" "off" $mode }}
{{- else }}
{{- $mode }}
{{- end }}
{{- end }}

{{/*
The Kafka connection settings every binary reads, as NAME: "value" lines: all of them, empty when
unused (an empty variable means the binary's default), so none can also be set another way. The
SASL password is never among them: the pods read it from the mounted credentials Secret.
*/}}
{{- define "postline.kafkaSettings" -}}
{{- $k := .Values.kafka }}
{{- $dir := include "postline.kafkaDir" . }}
{{- $ca := or $k.tls.ca.secretName $k.tls.ca.configMapName }}
POSTLINE_KAFKA_BROKERS: {{ join "," $k.brokers | quote }}
POSTLINE_KAFKA_TLS: {{ include "postline.kafkaTLSMode" . | quote }}
POSTLINE_KAFKA_TLS_CA_FILE: {{ ternary (printf "%s/ca.crt" $dir) "" (not (empty $ca)) | quote }}
POSTLINE_KAFKA_TLS_CERT_FILE: {{ ternary (printf "%s/tls.crt" $dir) "" (not (empty $k.tls.clientCertSecret)) | quote }}
POSTLINE_KAFKA_TLS_KEY_FILE: {{ ternary (printf "%s/tls.key" $dir) "" (not (empty $k.tls.clientCertSecret)) | quote }}
POSTLINE_KAFKA_TLS_SERVER_NAME: {{ $k.tls.serverName | quote }}
POSTLINE_KAFKA_TLS_INSECURE_SKIP_VERIFY: {{ $k.tls.insecureSkipVerify | toString | quote }}
POSTLINE_KAFKA_SASL_MECHANISM: {{ $k.sasl.mechanism | quote }}
POSTLINE_KAFKA_SASL_USERNAME: {{ $k.sasl.username | quote }}
POSTLINE_KAFKA_SASL_PASSWORD_FILE: {{ ternary (printf "%s/sasl-password" $dir) "" (not (empty $k.sasl.mechanism)) | quote }}
{{- end }}

{{/*
The projected volume of the Kafka files, or nothing when no file is configured. Argument: root and
secret (the Secret holding the SASL password: the release's for the Deployments, the hooks' own
for the hooks).
*/}}
{{- define "postline.kafkaVolume" -}}
{{- $k := .root.Values.kafka }}
{{- if or $k.tls.ca.secretName $k.tls.ca.configMapName $k.tls.clientCertSecret $k.sasl.mechanism }}
- name: kafka
  projected:
    # 0440: the files are owned by root and the pod's fsGroup, which the nonroot user is in.
    defaultMode: 288
    sources:
      {{- with $k.tls.ca.secretName }}
      - secret:
          name: {{ . }}
          items:
            - key: {{ $k.tls.ca.key }}
              path: ca.crt
      {{- end }}
      {{- with $k.tls.ca.configMapName }}
      - configMap:
          name: {{ . }}
          items:
            - key: {{ $k.tls.ca.key }}
              path: ca.crt
      {{- end }}
      {{- with $k.tls.clientCertSecret }}
      - secret:
          name: {{ . }}
          items:
            - key: tls.crt
              path: tls.crt
            - key: tls.key
              path: tls.key
      {{- end }}
      {{- if $k.sasl.mechanism }}
      - secret:
          name: {{ .secret }}
          items:
            - key: {{ .root.Values.secret.keys.kafkaSASLPassword }}
              path: sasl-password
      {{- end }}
{{- end }}
{{- end }}

{{/* The mount of postline.kafkaVolume, or nothing when it is not rendered. */}}
{{- define "postline.kafkaVolumeMount" -}}
{{- $k := .Values.kafka }}
{{- if or $k.tls.ca.secretName $k.tls.ca.configMapName $k.tls.clientCertSecret $k.sasl.mechanism }}
- name: kafka
  mountPath: {{ include "postline.kafkaDir" . }}
  readOnly: true
{{- end }}
{{- end }}

{{/* Env that reads the credentials from the Secret named by "secret". */}}
{{- define "postline.databaseEnv" -}}
- name: POSTLINE_DATABASE_URL
  valueFrom:
    secretKeyRef:
      name: {{ .secret }}
      key: {{ .root.Values.secret.keys.databaseURL }}
{{- end }}

{{/*
A component's Deployment. Arguments: root (the chart's context), component (the binary: worker,
retry-scheduler, bounce-receiver, webhook-dispatcher or console), values (its section of the values),
config (the template of its ConfigMaps, whose checksum rolls the pods), credentials (whether it
reads the release's Secret), autoscaled (whether KEDA owns the replicas) and, optionally, env,
ports, volumes and volumeMounts (YAML lists added to the container's and the pod's).
*/}}
{{- define "postline.deployment" -}}
{{- $root := .root }}
{{- $v := .values }}
{{- $name := printf "%s-%s" (include "postline.fullname" $root) .component }}
apiVersion: apps/v1
kind: Deployment
metadata:
  name: {{ $name }}
  labels:
    {{- include "postline.labels" $root | nindent 4 }}
    app.kubernetes.io/component: {{ .component }}
spec:
  {{- if not .autoscaled }}
  replicas: {{ $v.replicas }}
  {{- end }}
  revisionHistoryLimit: 5
  strategy:
    type: RollingUpdate
    rollingUpdate:
      # Replace one pod at a time: for the consumers, each change is a consumer-group rebalance.
      maxSurge: 1
      maxUnavailable: 0
  selector:
    matchLabels:
      {{- include "postline.selectorLabels" $root | nindent 6 }}
      app.kubernetes.io/component: {{ .component }}
  template:
    metadata:
      labels:
        {{- include "postline.selectorLabels" $root | nindent 8 }}
        app.kubernetes.io/component: {{ .component }}
        {{- with $v.podLabels }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
      annotations:
        # Roll the pods when their settings or credentials change.
        checksum/config: {{ include (print $root.Template.BasePath "/" .config) $root | sha256sum }}
        {{- if and .credentials (not $root.Values.secret.existingSecret) }}
        {{- /* Of the values written to the Secret: generated return path keys are kept, not changed. */}}
        checksum/secret: {{ include "postline.secretStringData" $root | sha256sum }}
        {{- end }}
        {{- with $v.podAnnotations }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
    spec:
      {{- with $root.Values.serviceAccountName }}
      serviceAccountName: {{ . }}
      {{- end }}
      automountServiceAccountToken: false
      {{- with $root.Values.imagePullSecrets }}
      imagePullSecrets:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      securityContext:
        {{- toYaml $root.Values.podSecurityContext | nindent 8 }}
      terminationGracePeriodSeconds: {{ add $v.shutdownTimeoutSeconds $v.terminationGraceExtraSeconds }}
      containers:
        - name: {{ .component }}
          image: {{ include "postline.image" $root }}
          imagePullPolicy: {{ $root.Values.image.pullPolicy }}
          command:
            {{- toYaml $v.command | nindent 12 }}
          ports:
            - name: metrics
              containerPort: {{ $v.port }}
              protocol: TCP
            {{- with .ports }}
            {{- . | nindent 12 }}
            {{- end }}
          envFrom:
            - configMapRef:
                name: {{ $name }}
          env:
            {{- with .env }}
            {{- . | nindent 12 }}
            {{- end }}
            {{- if and $v.resources.limits $v.resources.limits.memory }}
            - name: GOMEMLIMIT
              valueFrom:
                resourceFieldRef:
                  resource: limits.memory
            {{- end }}
            {{- with $v.extraEnv }}
            {{- toYaml . | nindent 12 }}
            {{- end }}
          livenessProbe:
            httpGet:
              path: /healthz
              port: metrics
            {{- toYaml $v.livenessProbe | nindent 12 }}
          readinessProbe:
            httpGet:
              path: /readyz
              port: metrics
            {{- toYaml $v.readinessProbe | nindent 12 }}
          resources:
            {{- toYaml $v.resources | nindent 12 }}
          securityContext:
            {{- toYaml $root.Values.securityContext | nindent 12 }}
          volumeMounts:
            - name: tmp
              mountPath: /tmp
            {{- with include "postline.kafkaVolumeMount" $root | trim }}
            {{- . | nindent 12 }}
            {{- end }}
            {{- with .volumeMounts }}
            {{- . | nindent 12 }}
            {{- end }}
      volumes:
        - name: tmp
          emptyDir:
            sizeLimit: 64Mi
        {{- with include "postline.kafkaVolume" (dict "root" $root "secret" (include "postline.secretName" $root)) | trim }}
        {{- . | nindent 8 }}
        {{- end }}
        {{- with .volumes }}
        {{- . | nindent 8 }}
        {{- end }}
      {{- with $v.nodeSelector }}
      nodeSelector:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with $v.tolerations }}
      tolerations:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with $v.affinity }}
      affinity:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with $v.topologySpreadConstraints }}
      topologySpreadConstraints:
        {{- toYaml . | nindent 8 }}
      {{- end }}
{{- end }}

{{/* A component's metrics Service; postline.io/job becomes the scrape job of the ServiceMonitor. */}}
{{- define "postline.metricsService" -}}
{{- $root := .root }}
apiVersion: v1
kind: Service
metadata:
  name: {{ include "postline.fullname" $root }}-{{ .component }}-metrics
  labels:
    {{- include "postline.labels" $root | nindent 4 }}
    app.kubernetes.io/component: {{ .component }}
    postline.io/metrics: "true"
    postline.io/job: postline-{{ .component }}
  {{- with $root.Values.metrics.service.annotations }}
  annotations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
spec:
  type: {{ $root.Values.metrics.service.type }}
  selector:
    {{- include "postline.selectorLabels" $root | nindent 4 }}
    app.kubernetes.io/component: {{ .component }}
  ports:
    - name: metrics
      port: {{ .values.port }}
      targetPort: metrics
      protocol: TCP
{{- end }}

{{/* A component's PodDisruptionBudget. */}}
{{- define "postline.pdb" -}}
{{- $root := .root }}
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata:
  name: {{ include "postline.fullname" $root }}-{{ .component }}
  labels:
    {{- include "postline.labels" $root | nindent 4 }}
    app.kubernetes.io/component: {{ .component }}
spec:
  maxUnavailable: {{ .values.podDisruptionBudget.maxUnavailable }}
  selector:
    matchLabels:
      {{- include "postline.selectorLabels" $root | nindent 6 }}
      app.kubernetes.io/component: {{ .component }}
{{- end }}

{{/*
A hook Job running postctl. Arguments: root, name (suffix and container name), weight (lower runs
first), args (postctl's arguments), env (a YAML list of EnvVar) and, optionally, volumes and
volumeMounts (YAML lists).
*/}}
{{- define "postline.hookJob" -}}
{{- $root := .root }}
{{- $hooks := $root.Values.hooks }}
apiVersion: batch/v1
kind: Job
metadata:
  name: {{ include "postline.fullname" $root }}-{{ .name }}
  labels:
    {{- include "postline.labels" $root | nindent 4 }}
    app.kubernetes.io/component: {{ .name }}
  annotations:
    helm.sh/hook: pre-install,pre-upgrade
    helm.sh/hook-weight: {{ .weight | quote }}
    # Kept on failure for its logs; replaced by the next attempt.
    helm.sh/hook-delete-policy: before-hook-creation,hook-succeeded
spec:
  backoffLimit: {{ $hooks.backoffLimit }}
  activeDeadlineSeconds: {{ $hooks.activeDeadlineSeconds }}
  template:
    metadata:
      labels:
        {{- include "postline.selectorLabels" $root | nindent 8 }}
        app.kubernetes.io/component: {{ .name }}
    spec:
      restartPolicy: Never
      {{- with $root.Values.serviceAccountName }}
      serviceAccountName: {{ . }}
      {{- end }}
      automountServiceAccountToken: false
      {{- with $root.Values.imagePullSecrets }}
      imagePullSecrets:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      securityContext:
        {{- toYaml $root.Values.podSecurityContext | nindent 8 }}
      containers:
        - name: {{ .name }}
          image: {{ include "postline.image" $root }}
          imagePullPolicy: {{ $root.Values.image.pullPolicy }}
          command:
            {{- toYaml $hooks.command | nindent 12 }}
          args:
            {{- toYaml .args | nindent 12 }}
          env:
            {{- .env | nindent 12 }}
          resources:
            {{- toYaml $hooks.resources | nindent 12 }}
          securityContext:
            {{- toYaml $root.Values.securityContext | nindent 12 }}
          {{- with .volumeMounts }}
          volumeMounts:
            {{- . | nindent 12 }}
          {{- end }}
      {{- with .volumes }}
      volumes:
        {{- . | nindent 8 }}
      {{- end }}
{{- end }}

{{/* An env var from the release's Secret. Arguments: root, name (the variable), key and optional. */}}
{{- define "postline.secretKeyEnv" -}}
- name: {{ .name }}
  valueFrom:
    secretKeyRef:
      name: {{ include "postline.secretName" .root }}
      key: {{ .key }}
      {{- if .optional }}
      optional: true
      {{- end }}
{{- end }}

{{/* The worker's credentials: the database URL, the relays, the relay password, the return path keys. */}}
{{- define "postline.workerEnv" -}}
{{- $keys := .Values.secret.keys }}
{{- include "postline.databaseEnv" (dict "root" . "secret" (include "postline.secretName" .)) }}
{{ include "postline.secretKeyEnv" (dict "root" . "name" "POSTLINE_SMTP_RELAYS" "key" $keys.smtpRelays "optional" true) }}
{{ include "postline.secretKeyEnv" (dict "root" . "name" "POSTLINE_SMTP_PASSWORD" "key" $keys.smtpPassword "optional" true) }}
{{ include "postline.secretKeyEnv" (dict "root" . "name" "POSTLINE_RETURN_PATH_KEYS" "key" $keys.returnPathKeys "optional" true) }}
{{- end }}

{{/*
The bounce-receiver's credentials: the database URL, the return path keys (required: the
receiver cannot read a return path without them) and Mailgun's webhook signing key (optional:
without it /hooks/mailgun is off).
*/}}
{{- define "postline.bounceReceiverEnv" -}}
{{- $keys := .Values.secret.keys }}
{{- include "postline.databaseEnv" (dict "root" . "secret" (include "postline.secretName" .)) }}
{{ include "postline.secretKeyEnv" (dict "root" . "name" "POSTLINE_RETURN_PATH_KEYS" "key" $keys.returnPathKeys "optional" false) }}
{{ include "postline.secretKeyEnv" (dict "root" . "name" "POSTLINE_MAILGUN_SIGNING_KEY" "key" $keys.mailgunSigningKey "optional" true) }}
{{- end }}

{{/* Where the bounce-receiver's STARTTLS certificate is mounted. */}}
{{- define "postline.bounceTLSDir" -}}
/etc/postline/bounce-tls
{{- end }}

{{/* Where the webhook-dispatcher's endpoints file is mounted. */}}
{{- define "postline.webhooksDir" -}}
/etc/postline/webhooks
{{- end }}

{{/*
The webhook-dispatcher's credentials: the database URL (the endpoints' retry queues live there)
and the endpoint secrets, one variable per secret_env of the endpoints, read from the key of that
name in webhookDispatcher.endpointSecrets.secretName.
*/}}
{{- define "postline.webhookDispatcherEnv" -}}
{{- include "postline.databaseEnv" (dict "root" . "secret" (include "postline.secretName" .)) }}
{{- $seen := dict }}
{{- range .Values.webhookDispatcher.endpoints }}
{{- if not (hasKey $seen .secret_env) }}
{{- $_ := set $seen .secret_env true }}
- name: {{ .secret_env }}
  valueFrom:
    secretKeyRef:
      name: {{ $.Values.webhookDispatcher.endpointSecrets.secretName }}
      key: {{ .secret_env }}
{{- end }}
{{- end }}
{{- end }}

{{/*
Whether a part of the outcome loop runs, as "true" or "": its enabled value when true or false,
else (null, unset) whether outcomes.bounceDomain is set. Arguments: root and enabled.
*/}}
{{- define "postline.onWithBounceDomain" -}}
{{- if kindIs "bool" .enabled }}
{{- ternary "true" "" .enabled }}
{{- else if .root.Values.outcomes.bounceDomain }}
{{- "true" }}
{{- end }}
{{- end }}

{{/* Whether the bounce-receiver runs ("true" or ""): bounceReceiver.enabled, by default on with a bounce domain. */}}
{{- define "postline.bounceReceiverEnabled" -}}
{{- include "postline.onWithBounceDomain" (dict "root" . "enabled" .Values.bounceReceiver.enabled) }}
{{- end }}

{{/* Whether the webhook-dispatcher runs ("true" or ""): webhookDispatcher.enabled, by default on with a bounce domain. */}}
{{- define "postline.webhookDispatcherEnabled" -}}
{{- include "postline.onWithBounceDomain" (dict "root" . "enabled" .Values.webhookDispatcher.enabled) }}
{{- end }}

{{/*
The return path keys the chart makes itself, or "": only with outcomes.bounceDomain set and neither
secret.returnPathKeys nor secret.existingSecret. An upgrade keeps the key the release's Secret
already holds (lookup); an install, or a render that cannot reach the cluster (helm template),
makes a new one: 32 random bytes, base64 (randBytes).
*/}}
{{- define "postline.generatedReturnPathKeys" -}}
{{- if and .Values.outcomes.bounceDomain (not .Values.secret.returnPathKeys) (not .Values.secret.existingSecret) }}
{{- $kept := "" }}
{{- $secret := lookup "v1" "Secret" .Release.Namespace (include "postline.fullname" .) }}
{{- with $secret }}
{{- $kept = index (default dict .data) $.Values.secret.keys.returnPathKeys | default "" | b64dec }}
{{- end }}
{{- $kept | default (randBytes 32) }}
{{- end }}
{{- end }}

{{/*
The stringData of the release's Secret written from the values, as KEY: "value" lines; the
generated return path keys are added by secret.yaml. The pods' checksum/secret is of this, so
an upgrade that keeps the generated keys does not roll them.
*/}}
{{- define "postline.secretStringData" -}}
{{ .Values.secret.keys.databaseURL }}: {{ .Values.secret.databaseURL | quote }}
{{- with .Values.secret.smtpRelays }}
{{ $.Values.secret.keys.smtpRelays }}: {{ . | quote }}
{{- end }}
{{- with .Values.secret.smtpPassword }}
{{ $.Values.secret.keys.smtpPassword }}: {{ . | quote }}
{{- end }}
{{- with .Values.secret.returnPathKeys }}
{{ $.Values.secret.keys.returnPathKeys }}: {{ . | quote }}
{{- end }}
{{- with .Values.secret.mailgunSigningKey }}
{{ $.Values.secret.keys.mailgunSigningKey }}: {{ . | quote }}
{{- end }}
{{- with .Values.secret.kafkaSASLPassword }}
{{ $.Values.secret.keys.kafkaSASLPassword }}: {{ . | quote }}
{{- end }}
{{- end }}

{{/*
Checks of the outcome loop's values (bounce domain, receiver, dispatcher); each failure names the
values to change. Without secret.returnPathKeys the chart generates the keys, and an
existingSecret must hold them: neither can be checked here.
*/}}
{{- define "postline.validateOutcomes" -}}
{{- if and (kindIs "bool" .Values.bounceReceiver.enabled) .Values.bounceReceiver.enabled (not .Values.outcomes.bounceDomain) }}
{{- fail "bounceReceiver.enabled needs outcomes.bounceDomain: the domain of the return paths the workers write and the receiver reads (set only outcomes.bounceDomain and the receiver is on by default)" }}
{{- end }}
{{- if include "postline.bounceReceiverEnabled" . }}
{{- if eq (int .Values.bounceReceiver.smtpPort) (int .Values.bounceReceiver.port) }}
{{- fail (printf "bounceReceiver.smtpPort and bounceReceiver.port are both %d" (int .Values.bounceReceiver.port)) }}
{{- end }}
{{- $hooks := int .Values.bounceReceiver.hooksPort }}
{{- if and (gt $hooks 0) (or (eq $hooks (int .Values.bounceReceiver.port)) (eq $hooks (int .Values.bounceReceiver.smtpPort))) }}
{{- fail (printf "bounceReceiver.hooksPort %d is already bounceReceiver.port or bounceReceiver.smtpPort" $hooks) }}
{{- end }}
{{- end }}
{{- if and (include "postline.webhookDispatcherEnabled" .) .Values.webhookDispatcher.endpoints (not .Values.webhookDispatcher.endpointSecrets.secretName) }}
{{- fail "webhookDispatcher.endpoints need webhookDispatcher.endpointSecrets.secretName: the Secret holding each endpoint's signing secret under the key named by its secret_env" }}
{{- end }}
{{- end }}

{{/* Where the console's certificate and key are mounted. */}}
{{- define "postline.consoleTLSDir" -}}
/etc/postline/console-tls
{{- end }}
