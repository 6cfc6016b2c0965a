package multinode

import nodeconformance "github.com/netshim/netshim/test/node-conformance"

// ConformanceTag marks the specs of Kubernetes' conformance suite.
const ConformanceTag = "[Conformance]"

// QuickFocus is the `make conformance-cluster-quick` subset (in make
// test): sig-network's conformance specs, where a multi-node cluster
// differs most from one node, and the conformance specs that need two
// schedulable nodes.
var QuickFocus = []string{
	`\[sig-network\].*\[Conformance\]`,
	`\[sig-apps\] Daemon set \[Serial\] should rollback without unnecessary restarts \[Conformance\]`,
}

// SkipList is the reviewed list of [Conformance] specs this machine cannot
// pass whatever netshim does, each with its reason. Everything else must
// pass: a failure outside this list is a netshim bug to fix, not a line to
// add here. docs/conformance.md shows this table.
var SkipList = []nodeconformance.Skip{}
