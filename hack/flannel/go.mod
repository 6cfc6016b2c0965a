// The flannel wrapper module: see hack/cluster-images.sh (bins). flanneld is
// flannel's own main package (github.com/flannel-io/flannel, its main.go),
// built from the Go module proxy as a dependency of this module.
//
// flannel's main imports every backend, tencentvpc among them, and that
// backend imports github.com/tencentcloud/tencentcloud-sdk-go/tencentcloud/vpc,
// which the module proxy refuses (403) at every version flannel could use.
// The replace below puts a local module in its place (stubs/vpc): only the
// identifiers flannel's tencentvpc backend names, written here, whose client
// fails every call. So flanneld is flannel's main unchanged; only its
// "tencent-vpc" backend type fails at start (the cluster uses "vxlan").
module github.com/netshim/netshim/hack/flannel

go 1.26.0

require github.com/flannel-io/flannel v0.28.10

replace github.com/tencentcloud/tencentcloud-sdk-go/tencentcloud/vpc => ./stubs/vpc
