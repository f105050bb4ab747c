package tend

import "testing"

type probeConfig struct {
	URL     string   `json:"url" tend:"required" example:"http://127.0.0.1:10248/healthz"`
	Retries int      `json:"retries" example:"3"`
	Tags    []string `json:"tags"`
}

func TestParseConfig(t *testing.T) {
	var cfg probeConfig
	err := ParseConfig(Context{Plugin: "p", Config: `{"url":"http://x/","retries":2,"tags":["a"]}`}, &cfg)
	if err != nil || cfg.URL != "http://x/" || cfg.Retries != 2 || len(cfg.Tags) != 1 {
		t.Fatalf("%v %+v", err, cfg)
	}
	for config, want := range map[string]string{
		`{}`:                        `[plugins.p.config] url: expected a string, for example "http://127.0.0.1:10248/healthz"`,
		`{"url":7}`:                 `[plugins.p.config] url: expected a string, for example "http://127.0.0.1:10248/healthz"`,
		`{"url":"u","retries":"x"}`: `[plugins.p.config] retries: expected an integer, for example 3`,
		`{"url":"u","tags":[1]}`:    `[plugins.p.config] tags: expected a list of strings`,
		`{"url":"u","retires":1}`:   `[plugins.p.config] retires: unknown key; the keys are url, retries, tags`,
		`[]`:                        `[plugins.p.config]: expected a table`,
	} {
		err := ParseConfig(Context{Plugin: "p", Config: config}, &probeConfig{})
		if kind, _ := KindOf(err); kind != Invalid || err.(*Error).Message != want {
			t.Errorf("%s: got %v, want invalid: %s", config, err, want)
		}
	}
}
