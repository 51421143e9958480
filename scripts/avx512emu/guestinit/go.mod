module avx512emu/guestinit

go 1.22
