// The CLI's error: a message for the operator (naming the flag or file at fault) and the exit
// code. 2 is bad usage, 1 a failure of what was asked.
export class CliError extends Error {
  readonly exitCode: number;
  constructor(message: string, exitCode = 2) {
    super(message);
    this.name = "CliError";
    this.exitCode = exitCode;
  }
}
