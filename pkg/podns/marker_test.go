package podns

import (
	"reflect"
	"testing"
)

func TestParseEnv(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    Paths
		wantErr bool
	}{
		{in: "", want: Paths{}},
		{in: "net=/run/netshim/netns/p.net", want: Paths{Net: "/run/netshim/netns/p.net"}},
		{in: "ipc=/d/p.ipc,net=/d/p.net,uts=/d/p.uts", want: Paths{Net: "/d/p.net", IPC: "/d/p.ipc", UTS: "/d/p.uts"}},
		{in: "pid=/d/p.pid", wantErr: true},
		{in: "mnt=/d/p", wantErr: true},
		{in: "net", wantErr: true},
		{in: "net=", wantErr: true},
		{in: "net=/a,net=/b", wantErr: true},
		{in: "net=/a,", wantErr: true},
	} {
		got, err := ParseEnv(tc.in)
		if (err != nil) != tc.wantErr {
			t.Errorf("ParseEnv(%q) error = %v, want error %v", tc.in, err, tc.wantErr)
			continue
		}
		if !tc.wantErr && !reflect.DeepEqual(got, tc.want) {
			t.Errorf("ParseEnv(%q) = %v, want %v", tc.in, got, tc.want)
		}
	}
}

func TestEnvRoundTrip(t *testing.T) {
	ps := Paths{UTS: "/d/p.uts", Net: "/d/p.net", IPC: "/d/p.ipc"}
	env := ps.Env()
	if want := EnvKey + "=ipc=/d/p.ipc,net=/d/p.net,uts=/d/p.uts"; env != want {
		t.Errorf("Env() = %q, want %q (sorted by kind)", env, want)
	}
	if !IsEnvEntry(env) {
		t.Errorf("IsEnvEntry(%q) = false", env)
	}
	got, err := ParseEnv(env[len(EnvKey)+1:])
	if err != nil || !reflect.DeepEqual(got, ps) {
		t.Errorf("ParseEnv(Env()) = %v, %v; want %v", got, err, ps)
	}
	for _, e := range []string{EnvKey, EnvKey + "X=1", "PATH=/bin"} {
		if IsEnvEntry(e) != (e == EnvKey) {
			t.Errorf("IsEnvEntry(%q) = %v", e, IsEnvEntry(e))
		}
	}
}
