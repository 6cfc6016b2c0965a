package dockerservice

import (
	"context"
	"encoding/json"
	"maps"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/netshim/netshim/internal/fakedocker"
	"github.com/netshim/netshim/pkg/dockerservice/labelcodec"
	"github.com/netshim/netshim/pkg/dockerservice/store"
	"github.com/netshim/netshim/pkg/network"
)

// hostileImageLabels are the labels of an image that tries to steer
// netshim: every key netshim writes or ever read back, with values that
// would show if netshim believed them. meta is the kind of meta label it
// forges (a valid one, for another pod).
func hostileImageLabels(metaKind string) map[string]string {
	var meta string
	if metaKind == labelcodec.TypeSandbox {
		meta = `{"v":1,"kind":"podsandbox","name":"evil","namespace":"evil","uid":"evil-uid","attempt":99,` +
			`"labels":{"evil":"1"},"annotations":{"evil":"1"},"namespaceOptions":{"network":2,"pid":2,"ipc":2},"runtimeHandler":"evil"}`
	} else {
		meta = `{"v":1,"kind":"container","sandboxID":"evil-sandbox","name":"evil","attempt":99,"labels":{"evil":"1"},` +
			`"annotations":{"io.kubernetes.container.restartCount":"99"},"image":{"image":"evil"},"imageRef":"evil",` +
			`"logPath":"/etc/passwd","mounts":[{"container_path":"/host","host_path":"/"}],"tty":true,"stopSignal":"SIGKILL"}`
	}
	return map[string]string{
		labelcodec.LabelMeta:                   meta,
		labelcodec.LabelType:                   metaKind,
		labelcodec.LabelSandboxID:              "evil-sandbox",
		labelcodec.LabelPodName:                "evil",
		labelcodec.LabelPodNamespace:           "evil",
		labelcodec.LabelPodUID:                 "evil-uid",
		labelcodec.LabelContainerName:          "evil",
		labelcodec.LegacyLabelAttempt:          "99",
		labelcodec.LegacyLabelNamespaceOptions: `{"network":2,"pid":2,"ipc":2}`,
		labelcodec.LegacyLabelRuntimeHandler:   "evil",
		labelcodec.LegacyLabelContainerAttempt: "99",
		labelcodec.LegacyLabelLogPath:          "/etc/passwd",
		labelcodec.LegacyLabelImageSpec:        `{"image":"evil","user_specified_image":"evil"}`,
		labelcodec.LegacyLabelImageRef:         "evil@sha256:eeee",
		labelcodec.LegacyLabelMounts:           `[{"container_path":"/host","host_path":"/"}]`,
		labelcodec.LegacyLabelTTY:              "true",
		labelcodec.LegacyLabelStopSignal:       "SIGKILL",
		labelcodec.CRILabelPrefix + "app":      "evil",
		labelcodec.CRILabelPrefix + "injected": "1",
		labelcodec.LegacyAnnotationPrefix + "io.kubernetes.container.restartCount": "99",
		labelcodec.LegacyAnnotationPrefix + "note":                                 "evil",
		labelcodec.LegacyAnnotationPrefix + "injected":                             "1",
	}
}

// criView is everything the CRI answers about one sandbox and one of its
// containers, plus what netshim itself acts on (tty, stop signal, log
// path), with the fields that legitimately differ between a record made
// at create time and one rebuilt from an inspect (timestamps, the image
// ID the fake reports) cleared.
type criView struct {
	sandboxStatus *runtimeapi.PodSandboxStatus
	sandboxItem   *runtimeapi.PodSandbox
	ctrStatus     *runtimeapi.ContainerStatus
	ctrItem       *runtimeapi.Container
	ctrKind       store.Kind
	ctrSandboxID  string
	tty           bool
	stopSignal    runtimeapi.Signal
	logPath       string
}

func viewOf(t *testing.T, ds *DockerService, sandboxID, ctrID string) criView {
	t.Helper()
	ctx := context.Background()
	var v criView
	sb, err := ds.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: sandboxID})
	if err != nil {
		t.Fatalf("PodSandboxStatus: %v", err)
	}
	v.sandboxStatus = sb.Status
	v.sandboxStatus.CreatedAt = 0
	sbs, err := ds.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{Filter: &runtimeapi.PodSandboxFilter{Id: sandboxID}})
	if err != nil || len(sbs.Items) != 1 {
		t.Fatalf("ListPodSandbox = %v, %v; want the sandbox", sbs, err)
	}
	v.sandboxItem = sbs.Items[0]
	v.sandboxItem.CreatedAt = 0
	st, err := ds.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: ctrID})
	if err != nil {
		t.Fatalf("ContainerStatus: %v", err)
	}
	v.ctrStatus = st.Status
	v.ctrStatus.CreatedAt, v.ctrStatus.ImageId = 0, ""
	cs, err := ds.ListContainers(ctx, &runtimeapi.ListContainersRequest{Filter: &runtimeapi.ContainerFilter{Id: ctrID}})
	if err != nil || len(cs.Containers) != 1 {
		t.Fatalf("ListContainers = %v, %v; want the container", cs, err)
	}
	v.ctrItem = cs.Containers[0]
	v.ctrItem.CreatedAt, v.ctrItem.ImageId = 0, ""
	rec, _ := ds.store().Get(ctrID)
	v.ctrKind, v.ctrSandboxID = rec.Kind, rec.SandboxID
	info := rec.ContainerInfo()
	v.tty, v.stopSignal, v.logPath = info.TTY, info.StopSignal, info.LogPath
	return v
}

func (v criView) diff(t *testing.T, what string, want criView) {
	t.Helper()
	for _, p := range []struct {
		name      string
		got, want proto.Message
	}{
		{"PodSandboxStatus", v.sandboxStatus, want.sandboxStatus},
		{"ListPodSandbox", v.sandboxItem, want.sandboxItem},
		{"ContainerStatus", v.ctrStatus, want.ctrStatus},
		{"ListContainers", v.ctrItem, want.ctrItem},
	} {
		if !proto.Equal(p.got, p.want) {
			t.Errorf("%s: %s =\n%v\nwant\n%v", what, p.name, p.got, p.want)
		}
	}
	if v.ctrKind != want.ctrKind || v.ctrSandboxID != want.ctrSandboxID || v.tty != want.tty || v.stopSignal != want.stopSignal || v.logPath != want.logPath {
		t.Errorf("%s: container kind %v sandbox %q tty %v stop signal %v log path %q; want %v %q %v %v %q", what,
			v.ctrKind, v.ctrSandboxID, v.tty, v.stopSignal, v.logPath,
			want.ctrKind, want.ctrSandboxID, want.tty, want.stopSignal, want.logPath)
	}
}

// restartService starts a second netshim over the same Docker and
// checkpoints, as after a daemon restart: its index comes from inspects.
func restartService(t *testing.T, e *testEnv) *DockerService {
	t.Helper()
	plugin := &fakePlugin{}
	ds, err := NewDockerService(Config{PodInfraImage: testPauseImage, NetworkPluginName: "fake"}, e.docker, e.ckpt, []network.NetworkPlugin{plugin})
	if err != nil {
		t.Fatal(err)
	}
	startService(t, ds)
	return ds
}

func TestImageLabelsCannotSteerCRIAnswers(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  func() *runtimeapi.ContainerConfig
		// what the container's answers must say, whatever the image.
		logPath    string
		tty        bool
		stopSignal runtimeapi.Signal
	}{
		{
			// Sets nothing the image could fill in.
			name: "minimal container",
			cfg: func() *runtimeapi.ContainerConfig {
				return &runtimeapi.ContainerConfig{
					Metadata: &runtimeapi.ContainerMetadata{Name: "min"},
					Image:    &runtimeapi.ImageSpec{Image: testImage},
				}
			},
			stopSignal: runtimeapi.Signal_SIGNAL_SIGTERM,
		},
		{
			name: "container setting everything",
			cfg: func() *runtimeapi.ContainerConfig {
				cfg := ctrConfig("full")
				cfg.Tty = true
				cfg.StopSignal = runtimeapi.Signal_SIGNAL_SIGQUIT
				cfg.Mounts = []*runtimeapi.Mount{{ContainerPath: "/data", HostPath: "/var/lib/kubelet/pods/x/volumes/data"}}
				cfg.Labels["io.kubernetes.container.restartCount"] = "0"
				cfg.Annotations["io.kubernetes.container.restartCount"] = "0"
				return cfg
			},
			logPath:    "full/2.log",
			tty:        true,
			stopSignal: runtimeapi.Signal_SIGNAL_SIGQUIT,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			e := newTestEnv(t)
			e.docker.AddImage(fakedocker.Image{ID: testImageID}, testImage, testImageDigest)
			e.docker.Do(func(s *fakedocker.State) {
				s.Images[testPauseImage] = hostileImageLabels(labelcodec.TypeSandbox)
				s.Images[testImage] = hostileImageLabels(labelcodec.TypeContainer)
			})
			pod := podConfig("web")
			pod.LogDirectory = "/var/log/pods/ns_web_uid-web"
			sandboxID := e.run(t, pod)
			cfg := tc.cfg()
			resp, err := e.ds.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: sandboxID, Config: cfg, SandboxConfig: pod})
			if err != nil {
				t.Fatalf("CreateContainer: %v", err)
			}
			ctrID := resp.ContainerId

			// Right after create the index holds what netshim asked
			// for (the sandbox was re-inspected once started): this is
			// the truth every later answer must repeat.
			want := viewOf(t, e.ds, sandboxID, ctrID)
			if !maps.Equal(want.ctrStatus.Labels, cfg.Labels) || !maps.Equal(want.ctrStatus.Annotations, cfg.Annotations) {
				t.Errorf("container labels %v annotations %v, want %v %v", want.ctrStatus.Labels, want.ctrStatus.Annotations, cfg.Labels, cfg.Annotations)
			}
			if !maps.Equal(want.sandboxStatus.Labels, pod.Labels) || !maps.Equal(want.sandboxStatus.Annotations, pod.Annotations) || !proto.Equal(want.sandboxStatus.Metadata, pod.Metadata) {
				t.Errorf("sandbox status %v, want the pod's metadata, labels and annotations", want.sandboxStatus)
			}
			wantLog := ""
			if tc.logPath != "" {
				wantLog = pod.LogDirectory + "/" + tc.logPath
			}
			if want.logPath != wantLog || want.ctrStatus.LogPath != wantLog || want.tty != tc.tty || want.stopSignal != tc.stopSignal {
				t.Errorf("log path %q tty %v stop signal %v, want %q %v %v", want.logPath, want.tty, want.stopSignal, wantLog, tc.tty, tc.stopSignal)
			}
			if want.ctrKind != store.KindContainer || want.ctrSandboxID != sandboxID {
				t.Errorf("container record kind %v sandbox %q", want.ctrKind, want.ctrSandboxID)
			}

			// Records rebuilt from Docker, where the image's labels
			// are merged in, say the same: after a re-inspect...
			e.ds.refreshRecord(ctx, sandboxID)
			e.ds.refreshRecord(ctx, ctrID)
			viewOf(t, e.ds, sandboxID, ctrID).diff(t, "after re-inspect", want)
			// ... and after a restart.
			viewOf(t, restartService(t, e), sandboxID, ctrID).diff(t, "after restart", want)
		})
	}
}

// oddMaps are CRI labels/annotations whose keys and values an encoding
// could mangle: empty values, separators, escapes, non-ASCII, and keys
// that look like netshim's own.
func oddMaps() map[string]string {
	return map[string]string{
		"empty":                "",
		"":                     "empty key",
		"a=b":                  "c=d",
		"with space":           " leading and trailing ",
		"multi\nline":          "a\nb\r\nc\t",
		"quote\"back\\slash":   `{"json":"value"}`,
		"html<>&":              "<script>&amp;</script>",
		"unicode-ünïcødé-✓":    "日本語 \u2028 \u00a0",
		"nul":                  "a\x00b",
		labelcodec.LabelMeta:   "not netshim's",
		labelcodec.LabelType:   "podsandbox",
		"label.nested":         "x",
		"annotation.nested":    "y",
		"io.kubernetes.pod.ns": strings.Repeat("v", 63),
	}
}

func TestCRILabelsAndAnnotationsRoundTripExactly(t *testing.T) {
	ctx := context.Background()
	e := newTestEnv(t)
	e.docker.AddImage(fakedocker.Image{ID: testImageID}, testImage, testImageDigest)
	pod := podConfig("odd")
	pod.Labels, pod.Annotations = oddMaps(), oddMaps()
	sandboxID := e.run(t, pod)
	cfg := ctrConfig("odd")
	cfg.Labels, cfg.Annotations = oddMaps(), oddMaps()
	resp, err := e.ds.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: sandboxID, Config: cfg, SandboxConfig: pod})
	if err != nil {
		t.Fatalf("CreateContainer: %v", err)
	}
	check := func(what string, ds *DockerService) {
		t.Helper()
		v := viewOf(t, ds, sandboxID, resp.ContainerId)
		for _, m := range []struct {
			name      string
			got, want map[string]string
		}{
			{"PodSandboxStatus labels", v.sandboxStatus.Labels, pod.Labels},
			{"PodSandboxStatus annotations", v.sandboxStatus.Annotations, pod.Annotations},
			{"ListPodSandbox labels", v.sandboxItem.Labels, pod.Labels},
			{"ListPodSandbox annotations", v.sandboxItem.Annotations, pod.Annotations},
			{"ContainerStatus labels", v.ctrStatus.Labels, cfg.Labels},
			{"ContainerStatus annotations", v.ctrStatus.Annotations, cfg.Annotations},
			{"ListContainers labels", v.ctrItem.Labels, cfg.Labels},
			{"ListContainers annotations", v.ctrItem.Annotations, cfg.Annotations},
		} {
			if !maps.Equal(m.got, m.want) {
				t.Errorf("%s: %s = %q, want exactly %q", what, m.name, m.got, m.want)
			}
		}
		// Selectors match on the exact keys and values.
		sel := map[string]string{"a=b": "c=d", "empty": "", "": "empty key"}
		if sbs, err := ds.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{Filter: &runtimeapi.PodSandboxFilter{LabelSelector: sel}}); err != nil || len(sbs.Items) != 1 {
			t.Errorf("%s: ListPodSandbox by odd selector = %v, %v", what, sbs, err)
		}
		if cs, err := ds.ListContainers(ctx, &runtimeapi.ListContainersRequest{Filter: &runtimeapi.ContainerFilter{LabelSelector: sel}}); err != nil || len(cs.Containers) != 1 {
			t.Errorf("%s: ListContainers by odd selector = %v, %v", what, cs, err)
		}
	}
	check("after create", e.ds)
	e.ds.refreshRecord(ctx, sandboxID)
	e.ds.refreshRecord(ctx, resp.ContainerId)
	check("after re-inspect", e.ds)
	check("after restart", restartService(t, e))
}

// legacySandboxLabels are the labels the previous netshim put on a sandbox or
// container made from cfg (or ctr): one label per fact.
func legacySandboxLabels(pod *runtimeapi.PodSandboxConfig) map[string]string {
	md := pod.Metadata
	ns, _ := json.Marshal(pod.GetLinux().GetSecurityContext().GetNamespaceOptions())
	l := map[string]string{
		labelcodec.LabelType: labelcodec.TypeSandbox, labelcodec.LabelPodName: md.Name, labelcodec.LabelPodNamespace: md.Namespace, labelcodec.LabelPodUID: md.Uid,
		labelcodec.LegacyLabelAttempt: strconv.FormatUint(uint64(md.Attempt), 10), labelcodec.LegacyLabelNamespaceOptions: string(ns),
	}
	for k, v := range pod.Labels {
		l[labelcodec.CRILabelPrefix+k] = v
	}
	for k, v := range pod.Annotations {
		l[labelcodec.LegacyAnnotationPrefix+k] = v
	}
	return l
}

func TestLegacyContainersStillDecode(t *testing.T) {
	e := newPodEnv(t)
	cfg := ctrConfig("old")
	cfg.Tty = true
	id := e.create(t, cfg)
	want := viewOf(t, e.ds, e.sandboxID, id)

	// Rewrite both containers' labels the way the previous netshim made
	// them (and with the pause image's label Docker merged in).
	spec, _ := json.Marshal(cfg.Image)
	ctrLabels := map[string]string{
		labelcodec.LabelType: labelcodec.TypeContainer, labelcodec.LabelSandboxID: e.sandboxID,
		labelcodec.LabelPodName: "web", labelcodec.LabelPodNamespace: "ns", labelcodec.LabelPodUID: "uid-web",
		labelcodec.LabelContainerName: "old", labelcodec.LegacyLabelContainerAttempt: "2",
		labelcodec.LegacyLabelLogPath: want.logPath, labelcodec.LegacyLabelImageSpec: string(spec), labelcodec.LegacyLabelImageRef: testImageDigest,
		labelcodec.LegacyLabelTTY: "true", labelcodec.LegacyLabelStopSignal: "SIGTERM",
	}
	for k, v := range cfg.Labels {
		ctrLabels[labelcodec.CRILabelPrefix+k] = v
	}
	for k, v := range cfg.Annotations {
		ctrLabels[labelcodec.LegacyAnnotationPrefix+k] = v
	}
	sbLabels := legacySandboxLabels(e.sandbox)
	sbLabels["image.label"] = "from-image"
	e.docker.Do(func(s *fakedocker.State) {
		s.Containers[e.sandboxID].Config.Labels = sbLabels
		s.Containers[id].Config.Labels = ctrLabels
	})

	viewOf(t, restartService(t, e.testEnv), e.sandboxID, id).diff(t, "legacy labels after restart", want)
}

func TestForgedOwnershipIsNotIndexed(t *testing.T) {
	e := newPodEnv(t)
	// Containers that say they are netshim's but whose labels cannot be
	// used: made outside netshim with only some of its labels, damaged,
	// or a pre-meta sandbox whose image supplied a meta label for
	// another pod. (A container made outside netshim with a complete,
	// consistent set of its labels cannot be told from netshim's own:
	// whoever can do that has the Docker socket anyway.)
	forged := []map[string]string{
		{labelcodec.LabelType: labelcodec.TypeSandbox},
		{labelcodec.LabelType: labelcodec.TypeContainer, labelcodec.LabelSandboxID: e.sandboxID},
		{labelcodec.LabelType: labelcodec.TypeSandbox, labelcodec.LabelPodUID: "u", labelcodec.LabelMeta: `{"v":1,"kind":"podsandbox","uid":"u`},
	}
	legacy := legacySandboxLabels(podConfig("old"))
	legacy[labelcodec.LabelMeta] = hostileImageLabels(labelcodec.TypeSandbox)[labelcodec.LabelMeta]
	forged = append(forged, legacy)
	e.docker.Do(func(s *fakedocker.State) {
		for i, l := range forged {
			id := strings.Repeat(string(rune('a'+i)), 64)
			s.Containers[id] = runningContainer(id, "forged-"+string(rune('a'+i)), l)
		}
	})

	ds := restartService(t, e.testEnv)
	if n := ds.store().Len(); n != 1 {
		t.Errorf("index holds %d containers, want only the real sandbox", n)
	}
	list, err := ds.ListPodSandbox(context.Background(), &runtimeapi.ListPodSandboxRequest{})
	if err != nil || len(list.Items) != 1 || list.Items[0].Id != e.sandboxID {
		t.Errorf("ListPodSandbox = %v, %v; want only %s", list, err, e.sandboxID)
	}
	cs, err := ds.ListContainers(context.Background(), &runtimeapi.ListContainersRequest{})
	if err != nil || len(cs.Containers) != 0 {
		t.Errorf("ListContainers = %v, %v; want none", cs, err)
	}
}

// runningContainer is a running container made behind netshim's back.
func runningContainer(id, name string, labels map[string]string) *container.InspectResponse {
	return &container.InspectResponse{
		ContainerJSONBase: &container.ContainerJSONBase{
			ID: id, Name: "/" + name, Created: time.Now().UTC().Format(time.RFC3339Nano), Image: testPauseImage,
			State:      &container.State{Status: "running", Running: true, Pid: 4242},
			HostConfig: &container.HostConfig{},
		},
		Config: &container.Config{Image: testPauseImage, Labels: labels},
	}
}
