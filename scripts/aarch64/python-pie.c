/* The interpreter as an application that embeds CPython is: a position-independent executable linked
 * to the shared libpython3.11.so.1.0, both loaded at randomised addresses. Debian's own python3.11 is
 * non-PIE and links libpython statically (load bias 0); this is what tests the shared-library lookup of
 * _PyRuntime and the load bias on arm64. Built by scripts/aarch64/make-vm.sh with the cross compiler. */
int Py_BytesMain(int argc, char **argv);

int main(int argc, char **argv) { return Py_BytesMain(argc, argv); }
