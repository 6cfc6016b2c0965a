// Command cni-sleep is a test-only CNI plugin that makes a chain slow: its
// ADD sleeps for the "sleep" duration of its netconf (e.g. "150ms") and
// then hands the previous plugin's result on unchanged. Appended to a
// conflist, it stands for the plugins whose ADD waits on something remote
// (an IPAM datastore, a policy agent), which is where a runtime that runs
// CNI ADD in parallel with the sandbox start gains most. DEL, CHECK, GC,
// STATUS and VERSION answer at once.
//
// `make bench` builds it into _output/cni-sleep (hack/bench.sh) for its
// slow-chain rows (docs/benchmarks.md). Not for production.
package main

import (
	"time"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/cni/pkg/version"
)

func main() {
	p := plugin{sleep: time.Sleep}
	skel.PluginMainFuncs(p.funcs(), supportedVersions,
		"cni-sleep: a test CNI plugin whose ADD sleeps for its netconf's \"sleep\" duration, then passes prevResult on")
}

// supportedVersions starts at 0.3.0, the first spec with chains (and so
// with a prevResult to pass on).
var supportedVersions = version.VersionsStartingFrom("0.3.0")

// funcs is the plugin's CNI commands; ADD prints the result it passes on,
// converted to the netconf's cniVersion.
func (p plugin) funcs() skel.CNIFuncs {
	return skel.CNIFuncs{
		Add: func(args *skel.CmdArgs) error {
			conf, res, err := p.add(args)
			if err != nil {
				return err
			}
			return types.PrintResult(res, conf.CNIVersion)
		},
		Check:  p.check,
		Del:    p.del,
		GC:     p.gc,
		Status: p.status,
	}
}
