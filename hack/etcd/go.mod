// The etcd wrapper module: see hack/cluster-images.sh (bins). etcd's own
// main package (go.etcd.io/etcd/server/v3, server/main.go) lives in a module
// whose go.mod replaces its sibling modules with ../ paths, which only work
// inside etcd's repository; required from here, those replaces do not apply
// and the published siblings are used. main.go calls the same entry point.
module github.com/netshim/netshim/hack/etcd

go 1.24.0

require go.etcd.io/etcd/server/v3 v3.6.8
