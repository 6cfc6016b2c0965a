//go:build tools

// Package tools pins the module's direct dependencies before code uses them
// all, so that parallel work on packages does not race on go.mod.
package tools

import (
	_ "github.com/containernetworking/cni/libcni"
	_ "github.com/docker/docker/client"
	_ "github.com/fsnotify/fsnotify"
	_ "github.com/spf13/cobra"
	_ "github.com/vishvananda/netlink"
	_ "github.com/vishvananda/netns"
	_ "google.golang.org/grpc"
	_ "k8s.io/cri-api/pkg/apis/runtime/v1"
	_ "k8s.io/klog/v2"
	_ "k8s.io/cri-streaming/pkg/streaming"
	_ "k8s.io/cri-streaming/pkg/streaming/portforward"
	_ "k8s.io/cri-streaming/pkg/streaming/remotecommand"
)
