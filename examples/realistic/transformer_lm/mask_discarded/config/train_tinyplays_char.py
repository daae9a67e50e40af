# train a miniature character-level model on generated play dialogue
# good for debugging and playing on a laptop without a GPU

out_dir = 'out-tinyplays-char'
eval_interval = 100 # keep frequent because we'll overfit
eval_iters = 20
log_interval = 20 # don't print too too often

# we expect to overfit on this small dataset, so only save when val improves
always_save_checkpoint = False

dataset = 'tinyplays_char'
gradient_accumulation_steps = 1
batch_size = 16
block_size = 64 # context of up to 64 previous characters

# baby GPT model :)
n_layer = 2
n_head = 4
n_embd = 64
dropout = 0.0

learning_rate = 6e-3 # with baby networks can afford to go a bit higher
max_iters = 500
lr_decay_iters = 500 # make equal to max_iters usually
min_lr = 6e-4 # learning_rate / 10 usually
beta2 = 0.99 # make a bit bigger because number of tokens per iter is small

warmup_iters = 50 # not super necessary potentially

device = 'cpu'
compile = False
