package network

import "context"

// NoopPlugin leaves pods with the network Docker gives them. Used with
// --network-plugin=none; every operation succeeds and reports no IPs.
type NoopPlugin struct{}

var _ NetworkPlugin = NoopPlugin{}

func (NoopPlugin) Init(Host, PluginConfig) error             { return nil }
func (NoopPlugin) Event(string, map[string]any)              {}
func (NoopPlugin) Name() string                              { return NoopPluginName }
func (NoopPlugin) Capabilities() Capabilities                { return 0 }
func (NoopPlugin) Status() error                             { return nil }
func (NoopPlugin) TearDownPod(context.Context, PodRef) error { return nil }
func (NoopPlugin) SetUpPod(context.Context, PodRef, map[string]string, SetUpOptions) error {
	return nil
}
func (NoopPlugin) GetPodNetworkStatus(context.Context, PodRef) (*PodNetworkStatus, error) {
	return &PodNetworkStatus{}, nil
}
