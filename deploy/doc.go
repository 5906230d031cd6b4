// Package deploy holds no code of its own: its tests keep the deployment
// files honest. They load docker-compose.yml with compose-go and check it
// against the binaries' real settings, parse the Dockerfile, and run promtool
// on deploy/prometheus (config, alert rules and their unit tests). The
// dashboards are deploy/grafana's; the Helm chart is deploy/helm's.
package deploy
