{{/* Labels every object carries: kubeadm's k8s-app label, which the Service selects on. */}}
{{- define "clusterdns.selector" -}}
k8s-app: kube-dns
{{- end -}}
