// Package deploy holds no code of its own: its tests keep the deployment
// files honest. They load docker-compose.yml with compose-go and check it
// against the binaries' real settings, parse the Dockerfile, and run promtool
// on deploy/prometheus (config, alert rules and their unit tests). They also
// keep the documentation true to the tree: every link of README.md and docs/
// resolves, every alert has its runbook, and the package map of
// docs/design.md lists exactly the module's packages. The dashboards are
// deploy/grafana's; the Helm chart is deploy/helm's.
package deploy
