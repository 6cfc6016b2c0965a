// Package e2e holds netshim's end-to-end tests. They are behind the "e2e"
// build tag and need root, a Docker engine, CNI plugins and crictl; see
// README.md, or run `make e2e`.
package e2e
