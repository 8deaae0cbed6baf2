// --help text and shell completion scripts, both from the commands' specs. Pure.
import type { CommandSpec, OptionSpec } from "./spec.ts";
import { HELP_OPTION } from "./spec.ts";

function flagLabel(name: string, o: OptionSpec): string {
  const short = o.short ? `-${o.short}, ` : "    ";
  return `${short}--${name}${o.type === "string" ? ` ${o.arg ?? "VALUE"}` : ""}`;
}

function wrap(text: string, width: number): string[] {
  const lines: string[] = [];
  let line = "";
  for (const word of text.split(" ")) {
    if (line && line.length + 1 + word.length > width) {
      lines.push(line);
      line = word;
    } else line = line ? `${line} ${word}` : word;
  }
  if (line) lines.push(line);
  return lines;
}

function describeOption(o: OptionSpec): string {
  const parts = [o.help];
  if (o.choices && !o.help.includes(o.choices.join(", "))) parts.push(`one of ${o.choices.join(", ")}`);
  if (o.multiple) parts.push(o.repeatOnly ? "repeat for more" : "repeat or separate with commas");
  const text = parts.join("; ");
  return o.default !== undefined ? `${text} (default ${o.default})` : text;
}

export function renderCommandHelp(spec: CommandSpec): string {
  const options = { ...spec.options, help: HELP_OPTION };
  const labels = Object.entries(options).map(([n, o]) => flagLabel(n, o));
  const width = Math.min(38, Math.max(...labels.map((l) => l.length)) + 2);
  const rows = Object.entries(options).map(([_n, o], i) => {
    const label = labels[i]!;
    const desc = wrap(describeOption(o), 100 - width - 2).join(`\n  ${" ".repeat(width)}`);
    return label.length + 2 > width ? `  ${label}\n  ${" ".repeat(width)}${desc}` : `  ${label.padEnd(width)}${desc}`;
  });
  const out = [
    `meshcnictl ${spec.name}: ${spec.summary}`,
    "",
    `Usage: meshcnictl ${spec.name} ${spec.usage}`.trimEnd(),
  ];
  if (spec.description) out.push("", spec.description);
  out.push("", "Flags:", ...rows);
  if (spec.examples?.length) out.push("", "Examples:", ...spec.examples.map((e) => `  ${e}`));
  return `${out.join("\n")}\n`;
}

export function renderMainHelp(specs: readonly CommandSpec[], version: string): string {
  const width = Math.max(...specs.map((s) => s.name.length)) + 2;
  return [
    `meshcnictl ${version}: install, inspect and check meshcni, the service-mesh CNI plugin`,
    "",
    "Usage: meshcnictl COMMAND [flags]",
    "",
    "Commands:",
    ...specs.map((s) => `  ${s.name.padEnd(width)}${s.summary}`),
    "",
    "Run meshcnictl COMMAND --help for a command's flags.",
    "",
  ].join("\n");
}

const shellWords = (xs: readonly string[]) => xs.join(" ");

export function renderBashCompletion(specs: readonly CommandSpec[]): string {
  const cases = specs.map((s) => {
    const opts = { ...s.options, help: HELP_OPTION };
    const words = Object.entries(opts).flatMap(([n, o]) => [`--${n}`, ...(o.short ? [`-${o.short}`] : [])]);
    const valueCases = Object.entries(opts)
      .filter(([, o]) => o.type === "string")
      .map(([n, o]) => {
        const pats = [`--${n}`, ...(o.short ? [`-${o.short}`] : [])].join("|");
        const action = o.choices
          ? `COMPREPLY=($(compgen -W "${shellWords(o.choices)}" -- "$cur"))`
          : o.dir
            ? `COMPREPLY=($(compgen -d -- "$cur"))`
            : o.file
              ? `COMPREPLY=($(compgen -f -- "$cur"))`
              : "COMPREPLY=()";
        return `        ${pats}) ${action}; return ;;`;
      });
    const args = s.argChoices ? `      COMPREPLY=($(compgen -W "${shellWords(s.argChoices)}" -- "$cur")); return` : "";
    return [
      `    ${s.name})`,
      `      case "$prev" in`,
      ...valueCases,
      `      esac`,
      `      if [[ "$cur" == -* ]]; then COMPREPLY=($(compgen -W "${shellWords(words)}" -- "$cur")); return; fi`,
      args,
      `      ;;`,
    ]
      .filter(Boolean)
      .join("\n");
  });
  return [
    "# bash completion for meshcnictl; load with: source <(meshcnictl completion bash)",
    "_meshcnictl() {",
    "  local cur prev cmd",
    '  cur="${COMP_WORDS[COMP_CWORD]}"',
    '  prev="${COMP_WORDS[COMP_CWORD-1]}"',
    '  cmd="${COMP_WORDS[1]}"',
    "  if [[ $COMP_CWORD -eq 1 ]]; then",
    `    COMPREPLY=($(compgen -W "${shellWords(specs.map((s) => s.name))} --help" -- "$cur"))`,
    "    return",
    "  fi",
    '  case "$cmd" in',
    ...cases,
    "  esac",
    "}",
    "complete -F _meshcnictl meshcnictl",
    "",
  ].join("\n");
}

function zshEscape(s: string): string {
  return s
    .replace(/\\/g, "\\\\")
    .replace(/'/g, "'\\''")
    .replace(/\[/g, "\\[")
    .replace(/\]/g, "\\]")
    .replace(/:/g, "\\:");
}

export function renderZshCompletion(specs: readonly CommandSpec[]): string {
  const fns = specs.map((s) => {
    const opts = { ...s.options, help: HELP_OPTION };
    const lines = Object.entries(opts).map(([n, o]) => {
      const desc = zshEscape(o.help);
      const action =
        o.type === "boolean"
          ? ""
          : o.choices
            ? `:${o.arg ?? "value"}:(${o.choices.join(" ")})`
            : o.dir
              ? `:${o.arg ?? "dir"}:_files -/`
              : o.file
                ? `:${o.arg ?? "file"}:_files`
                : `:${o.arg ?? "value"}:`;
      const rep = o.multiple ? "*" : "";
      const names = o.short ? `{-${o.short},--${n}}` : `--${n}`;
      return `    '${rep}${names}[${desc}]${action}' \\`;
    });
    const arg = s.argChoices ? `    '1:${s.name}:(${s.argChoices.join(" ")})' \\` : "";
    return [`_meshcnictl_${s.name.replace(/-/g, "_")}() {`, "  _arguments -s \\", ...lines, arg, "    && return 0", "}"]
      .filter(Boolean)
      .join("\n");
  });
  const commands = specs.map((s) => `    '${s.name}:${zshEscape(s.summary)}'`);
  return [
    "#compdef meshcnictl",
    "# zsh completion for meshcnictl; load with: source <(meshcnictl completion zsh)",
    ...fns,
    "_meshcnictl() {",
    "  local -a commands",
    "  commands=(",
    ...commands,
    "  )",
    "  if (( CURRENT == 2 )); then",
    "    _describe -t commands 'meshcnictl command' commands",
    "    return",
    "  fi",
    "  local cmd=${words[2]}",
    "  shift words; (( CURRENT-- ))",
    "  (( $+functions[_meshcnictl_${cmd//-/_}] )) && _meshcnictl_${cmd//-/_}",
    "}",
    'if [ "$funcstack[1]" = "_meshcnictl" ]; then _meshcnictl "$@"; else compdef _meshcnictl meshcnictl; fi',
    "",
  ].join("\n");
}
