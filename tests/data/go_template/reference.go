// Writes reference.json: each case of cases.json rendered by Go's own text/template, with the options and
// functions Ollama uses (missingkey=zero, json). Chat cases carry their data as Ollama's template types
// (structs with the same field names, JSON-printing maps and tool lists). Run: go run reference.go
package main

import (
	"bytes"
	"encoding/json"
	"os"
	"text/template"
)

type Args map[string]any

func (a Args) String() string {
	if a == nil {
		return "{}"
	}
	b, _ := json.Marshal(a)
	return string(b)
}

type CallFunction struct {
	Index     int
	Name      string
	Arguments Args
}

type Call struct {
	ID       string
	Function CallFunction
}

type Message struct {
	Role       string
	Content    string
	Thinking   string
	Images     []string
	ToolCalls  []Call
	ToolName   string
	ToolCallID string
}

type Prop struct {
	Type        string `json:"type,omitempty"`
	Description string `json:"description,omitempty"`
	Enum        []any  `json:"enum,omitempty"`
}

type Props map[string]Prop

func (p Props) String() string {
	if p == nil {
		return "{}"
	}
	b, _ := json.Marshal(p)
	return string(b)
}

type Params struct {
	Type       string   `json:"type"`
	Required   []string `json:"required,omitempty"`
	Properties Props    `json:"properties"`
}

type ToolFunction struct {
	Name        string `json:"name"`
	Description string `json:"description"`
	Parameters  Params `json:"parameters"`
}

type Tool struct {
	Type     string       `json:"type"`
	Function ToolFunction `json:"function"`
}

type ToolList []Tool

func (t ToolList) String() string {
	b, _ := json.Marshal(t)
	return string(b)
}

// the cases' chat messages, in the OpenAI / Ollama API spelling
type InMessage struct {
	Role      string `json:"role"`
	Content   string `json:"content"`
	Thinking  string `json:"thinking"`
	ToolName  string `json:"tool_name"`
	ToolCalls []struct {
		ID       string `json:"id"`
		Function struct {
			Name      string `json:"name"`
			Arguments Args   `json:"arguments"`
		} `json:"function"`
	} `json:"tool_calls"`
}

type Case struct {
	Name     string         `json:"name"`
	Template string         `json:"template"`
	Data     map[string]any `json:"data"`
	Chat     *struct {
		Messages []InMessage `json:"messages"`
		Tools    ToolList   `json:"tools"`
	} `json:"chat"`
}

func main() {
	raw, err := os.ReadFile("cases.json")
	if err != nil {
		panic(err)
	}
	var cases []Case
	if err := json.Unmarshal(raw, &cases); err != nil {
		panic(err)
	}
	funcs := template.FuncMap{"json": func(v any) string { b, _ := json.Marshal(v); return string(b) }}
	out := map[string]map[string]string{}
	for _, c := range cases {
		data := c.Data
		if c.Chat != nil {
			if data == nil {
				data = map[string]any{}
			}
			var messages []*Message
			for _, m := range c.Chat.Messages {
				var calls []Call
				for i, call := range m.ToolCalls {
					calls = append(calls, Call{call.ID, CallFunction{i, call.Function.Name, call.Function.Arguments}})
				}
				messages = append(messages, &Message{Role: m.Role, Content: m.Content, Thinking: m.Thinking,
					ToolCalls: calls, ToolName: m.ToolName})
			}
			data["Messages"] = messages
			data["Tools"] = c.Chat.Tools
		}
		result := map[string]string{}
		tmpl, err := template.New("").Option("missingkey=zero").Funcs(funcs).Parse(c.Template)
		if err != nil {
			result["error"] = err.Error()
		} else {
			var b bytes.Buffer
			if err := tmpl.Execute(&b, data); err != nil {
				result["error"] = err.Error()
			} else {
				result["output"] = b.String()
			}
		}
		out[c.Name] = result
	}
	text, _ := json.MarshalIndent(out, "", "  ")
	os.WriteFile("reference.json", append(text, '\n'), 0o644)
}
