"""hf_jinja - Jinja2 configured the way HuggingFace transformers'
apply_chat_template configures it (transformers/utils/chat_template_utils.py):
ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
extensions=[AssistantTracker, loopcontrols]), a tojson filter that is
json.dumps(ensure_ascii=False, ...), raise_exception and strftime_now globals.
Rendering passes messages, tools, documents, add_generation_prompt, then the
special tokens and extra variables, as apply_chat_template does.

Used only to produce the expected outputs that tests compare xLLM against.
"""
import json
import warnings
from datetime import datetime

import jinja2
from jinja2.ext import Extension, loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment


# Jinja2 compiles templates to Python; a constant like (7)[1:] makes Python warn
warnings.filterwarnings("ignore", category=SyntaxWarning)


class TemplateError(Exception):
    pass


class AssistantTracker(Extension):
    """{% generation %}...{% endgeneration %} renders its body (HF uses it to
    mark assistant tokens; the text is unchanged)."""
    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_render", []), [], [], body).set_lineno(lineno)

    def _render(self, caller):
        return caller()


def raise_exception(message):
    raise TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def strftime_now(format):
    return datetime.now().strftime(format)


def environment():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[AssistantTracker, loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


_ENV = environment()


def render(source, messages, add_generation_prompt=False, tools=None, documents=None, **kwargs):
    """apply_chat_template(..., tokenize=False) for a template string."""
    return _ENV.from_string(source).render(messages=messages, tools=tools, documents=documents,
                                           add_generation_prompt=add_generation_prompt, **kwargs)


SPECIAL = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token")


def special_tokens(config):
    """The special_tokens_map HF passes to templates (set attributes only)."""
    def text(v):
        if isinstance(v, dict):
            return v.get("content")
        return v
    out = {}
    for k in SPECIAL:
        v = text(config.get(k))
        if v is not None:
            out[k] = v
    extra = [text(v) for v in config.get("additional_special_tokens") or []]
    if extra:
        out["additional_special_tokens"] = extra
    return out


def select_template(config, tools=None, name=None):
    ct = config["chat_template"]
    if isinstance(ct, str):
        return ct
    d = {e["name"]: e["template"] for e in ct}
    if name:
        return d[name]
    if tools is not None and "tool_use" in d:
        return d["tool_use"]
    return d["default"]
